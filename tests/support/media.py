"""Test media made with ffmpeg, and frame-level comparison helpers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.media import probe

Frames = npt.NDArray[np.uint8]


def make_clip(
    path: Path,
    *,
    seconds: float,
    size: str = "320x180",
    rate: str = "30",
    audio: bool = True,
    vfr: bool = False,
    extra: list[str] | None = None,
) -> Path:
    """A clip with moving content (testsrc2: a frame counter and moving shapes) and a sine tone.

    ``vfr`` stretches every fifth frame interval to 1.5x, giving a variable frame rate with the same frames. An odd
    ``size`` needs a pixel format that holds it (``extra=["-pix_fmt", "yuv444p"]``).
    """
    args = [
        "ffmpeg",
        "-v",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size={size}:rate={rate}:duration={seconds}",
    ]
    if audio:
        args += ["-f", "lavfi", "-i", f"sine=frequency=440:sample_rate=48000:duration={seconds}"]
    width, height = size.split("x")
    filters = [f"scale={width}:{height}"] if int(width) % 2 or int(height) % 2 else []  # testsrc2 makes even sizes
    if vfr:
        filters.append("setpts='(N+0.5*floor(N/5))/(FRAME_RATE*TB)'")
        args += ["-fps_mode", "vfr"]
    if filters:
        args += ["-vf", ",".join(filters)]
    args += ["-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p", "-g", "48"]
    if audio:
        args += ["-c:a", "aac", "-shortest"]
    args += [*(extra or []), str(path)]
    subprocess.run(args, check=True)
    return path


def read_frames(path: Path, frames: int | None = None) -> Frames:
    """Every frame of the first video stream (or its first ``frames``), decoded as it comes (no rate conversion),
    as [N,H,W,3] RGB. Decoding stops there: the 1080p crowd clip whole is 2.4 CPU-s, a test that looks at its
    first frames need not pay it.

    Frames are as a player shows them: ffmpeg applies rotation metadata, so their size is the displayed one.
    """
    media = probe(path)
    w, h = media.width, media.height
    first = [] if frames is None else ["-frames:v", str(frames)]
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:v:0", "-fps_mode", "passthrough", *first,
         "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


def psnr(a: Frames, b: Frames) -> float:
    mse = float(np.mean((a.astype(np.float32) - b.astype(np.float32)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def assert_frames_match(output: Frames, reference: Frames) -> None:
    """Same frame count, and every output frame i is closer to input frame i than to i-1 or i+1."""
    assert len(output) == len(reference), f"{len(output)} frames out, {len(reference)} in"
    for i in range(len(output)):
        own = psnr(output[i], reference[i])
        for j in (i - 1, i + 1):
            if 0 <= j < len(reference):
                other = psnr(output[i], reference[j])
                assert own > other, (
                    f"output frame {i} matches input {j} ({other:.1f} dB) better than {i} ({own:.1f} dB)"
                )


def stream_info(path: Path) -> dict[str, dict[str, str]]:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,duration,nb_frames:format_tags",
         "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    data = json.loads(out)
    result = {s["codec_type"]: s for s in data["streams"]}
    result["format"] = data.get("format", {}).get("tags", {})
    return result
