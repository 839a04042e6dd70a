"""Alpha from the frame pipe to the output: BGRA frames written to ProRes 4444 in MOV keep their alpha to the bit,
at even and odd sizes; chunks written so concatenate by stream copy, with the input's audio, with and without the
retimed path, and the result still has its alpha (read back by ffprobe and ffmpeg, as a user would). The default
path's command lines stay as they were."""

from __future__ import annotations

import json
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from shared.containers import MOV, MP4, container_of
from shared.options import EncoderOptions
from tests.support.media import make_clip
from workers.video import ffmpeg, mp4_timing
from workers.video.frame_scan import frame_times
from workers.video.pipes import FrameWriter

PRORES = EncoderOptions(encoder="prores_ks", quality=90)


def _frames(count: int, height: int, width: int, offset: int = 0) -> np.ndarray:
    """BGRA frames: a colour ramp that moves with the frame, the left third transparent, a ramp of alpha after."""
    frames = np.zeros((count, height, width, 4), np.uint8)
    for i in range(count):
        ys, xs = np.mgrid[0:height, 0:width]
        frames[i, ..., 0] = (xs * 3 + 20 * (i + offset)) % 256
        frames[i, ..., 1] = (ys * 5) % 256
        frames[i, ..., 2] = 128
        frames[i, ..., 3] = np.clip((xs - width // 3) * 8, 0, 255)
    return frames


def _write(path: Path, frames: np.ndarray) -> Path:
    writer = FrameWriter(
        path, width=frames.shape[2], height=frames.shape[1], fps="25/1", options=PRORES, alpha=True
    )  # fmt: skip
    writer.write(frames)
    writer.close()
    return path


def _probe(path: Path) -> dict[str, str]:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=codec_type,codec_name,pix_fmt,nb_frames",
         "-of", "json", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return {s["codec_type"]: f"{s['codec_name']} {s.get('pix_fmt', '')}".strip() for s in json.loads(out)["streams"]}


def _rgba(path: Path, height: int, width: int) -> np.ndarray:
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgba",
         "-"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 4)


@pytest.mark.parametrize(("height", "width"), [(48, 64), (49, 65)])
def test_prores_keeps_every_frames_alpha_to_the_bit(tmp_path: Path, height: int, width: int) -> None:
    """Even sizes travel as yuva420p and their alpha comes back exact; odd ones as BGRA, whose conversion to
    ProRes's 10 bits rounds some values between the two ends by one (measured); transparent and opaque stay exact."""
    frames = _frames(5, height, width)
    out = _write(tmp_path / "chunk.mov", frames)
    assert _probe(out)["video"].startswith("prores yuva444p")
    back = _rgba(out, height, width)
    assert len(back) == 5
    alpha, expected = back[..., 3].astype(int), frames[..., 3].astype(int)
    ends = (expected == 0) | (expected == 255)
    assert np.array_equal(alpha[ends], expected[ends])
    assert np.abs(alpha - expected).max() <= (0 if width % 2 == 0 else 1)
    colour_error = np.abs(back[..., :3].astype(int) - frames[..., 2::-1]).mean()  # RGB back, BGR in
    assert colour_error < 3  # 4:2:0 on the pipe of a sharp ramp, then ProRes


def test_chunks_with_alpha_stitch_by_stream_copy_with_the_audio_and_keep_their_alpha(tmp_path: Path) -> None:
    source = make_clip(tmp_path / "in.mp4", seconds=0.4, size="64x48", rate="25")  # 10 frames and audio
    chunks = [_frames(6, 48, 64), _frames(4, 48, 64, offset=6)]
    parts = [_write(tmp_path / f"{i:05d}.mov", frames) for i, frames in enumerate(chunks)]
    listing = tmp_path / "chunks.txt"
    listing.write_text(ffmpeg.concat_list(parts))
    stitched = tmp_path / "output.mov"
    ffmpeg.run(
        ffmpeg.stitch_args(listing, source, "aac", stitched, provenance=False, audio_demuxer="mov", container=MOV),
        what="stitch",
    )  # fmt: skip
    streams = _probe(stitched)
    assert streams["video"].startswith("prores yuva444p") and streams["audio"] == "aac"
    back = _rgba(stitched, 48, 64)
    expected = np.concatenate(chunks)
    assert len(back) == 10 and np.array_equal(back[..., 3], expected[..., 3])
    order = [int(np.argmin([np.abs(b[..., 2].astype(int) - e[..., 0]).mean() for e in expected])) for b in back]
    assert order == list(range(10))  # every frame once, in order

    # the variable-rate path: concatenated without faststart, its index retimed, remuxed with the audio
    video = tmp_path / "video.mov"
    ffmpeg.run(ffmpeg.concat_video_args(listing, video, MOV), what="stitch")
    times = [0.0, 0.04, 0.1, 0.13, 0.2, 0.3, 0.31, 0.36, 0.4, 0.45]
    mp4_timing.retime_video(video, times)
    remuxed = tmp_path / "retimed.mov"
    remux = ffmpeg.remux_args(video, source, "aac", remuxed, provenance=False, audio_demuxer="mov", container=MOV)
    ffmpeg.run(remux, what="stitch")
    assert frame_times(remuxed) == pytest.approx(times, abs=1e-3)
    assert np.array_equal(_rgba(remuxed, 48, 64)[..., 3], expected[..., 3])


def test_the_container_follows_the_encoder_and_alpha_only_prores() -> None:
    args = ffmpeg.encode_args(Path("c.mov"), 64, 48, "25/1", PRORES, "yuva420p", alpha=True)
    assert args[len(args) - 1 - args[::-1].index("-f") + 1] == "mov"  # the output's format, its last -f
    assert args[args.index("-pix_fmt", args.index("-c:v")) + 1] == "yuva444p10le"
    assert args[args.index("-profile:v") + 1] == "4444"
    assert ffmpeg.pipe_format(64, 48, alpha=True) == "yuva420p" and ffmpeg.pipe_format(65, 48, alpha=True) == "bgra"
    plain = ffmpeg.encode_args(Path("c.mp4"), 64, 48, "25/1", EncoderOptions(), "yuv420p")
    assert plain[len(plain) - 1 - plain[::-1].index("-f") + 1] == "mp4"
    assert plain[plain.index("-pix_fmt", plain.index("-c:v")) + 1] == "yuv420p"
    assert container_of("prores_ks") is MOV and container_of("libvpx-vp9") is MP4
    # QuickTime takes no Opus by stream copy: re-encoded there, copied into MP4 as before
    mov = ffmpeg.stitch_args(Path("l.txt"), Path("in.mkv"), "opus", Path("o.mov"), provenance=False, container=MOV)
    assert mov[mov.index("-c:a") + 1] == "aac" and mov[len(mov) - 1 - mov[::-1].index("-f") + 1] == "mov"
    mp4 = ffmpeg.stitch_args(Path("l.txt"), Path("in.mkv"), "opus", Path("o.mp4"), provenance=False)
    assert mp4[mp4.index("-c:a") + 1] == "copy"
    # output_fps re-encodes at the stitch: with the alpha plane where the chunks carry one
    resample = ffmpeg.Resample(Fraction(25), 64, 48, PRORES, alpha=True)
    again = ffmpeg.stitch_args(
        Path("l.txt"), None, None, Path("o.mov"), provenance=False, resample=resample, container=MOV
    )
    assert again[again.index("-pix_fmt") + 1] == "yuva444p10le" and again[again.index("-c:v") + 1] == "prores_ks"
