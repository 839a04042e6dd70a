"""Media probing with ffprobe: what the file is, and where each video frame sits in time.

The API uses :func:`probe` to refuse what is not a video before anything is stored; the planner uses
:func:`frame_times` to cut frame-exact chunks without decoding.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from shared.errors import FfmpegError, MediaLimitError, NotAVideoError, UnreadableMediaError

FFPROBE = "ffprobe"


@dataclass(frozen=True)
class MediaInfo:
    width: int  # as displayed: rotation already applied
    height: int
    fps: str  # a rational "num/den": the rate chunks are encoded at
    duration: float
    frame_count: int | None  # from the container header, when it says; the planner counts packets
    video_codec: str
    pix_fmt: str
    rotation: int
    start_time: float
    has_audio: bool
    audio_codec: str | None
    container: str

    @property
    def fps_value(self) -> float:
        return float(Fraction(self.fps))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MediaInfo:
        return cls(**data)


# FFmpeg refuses frames past its own size limit (about 16k x 16k) while reading the header; depending on the
# container the probe then fails or reports no size. Either way the file is too large, which is worth saying.
_INVALID_SIZE = re.compile(r"Picture size (\d+)x(\d+) is invalid")


def _run_ffprobe(args: list[str]) -> str:
    """ffprobe's output.

    Raises:
        MediaLimitError: ``resolution_too_large``: the file declares frames larger than FFmpeg decodes.
        UnreadableMediaError: ffprobe cannot read the file.
    """
    try:
        done = subprocess.run([FFPROBE, "-v", "error", *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError as exc:
        raise FfmpegError("ffprobe is not installed", code="ffmpeg_missing") from exc
    except subprocess.TimeoutExpired as exc:
        raise UnreadableMediaError("ffprobe timed out reading the file") from exc
    if oversized := _INVALID_SIZE.search(done.stderr):
        width, height = oversized.groups()
        raise MediaLimitError(
            f"the file declares frames of {width}x{height}, larger than can be decoded", code="resolution_too_large"
        )
    if done.returncode != 0:
        raise UnreadableMediaError(f"not a readable media file ({done.stderr.strip()[-300:] or 'no details'})")
    return done.stdout


def _rotation(stream: dict[str, Any]) -> int:
    for side in stream.get("side_data_list", []):
        if "rotation" in side:
            return int(round(float(side["rotation"]))) % 360
    tag = stream.get("tags", {}).get("rotate")
    return int(tag) % 360 if tag else 0


def _rate(value: str | None) -> Fraction | None:
    if not value or value in {"0/0", "0/1"}:
        return None
    try:
        rate = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return None
    return rate if rate > 0 else None


def probe(path: Path) -> MediaInfo:
    """Describe the first video stream of ``path``.

    Raises:
        UnreadableMediaError: ffprobe cannot read the file at all.
        NotAVideoError: the file has no video stream (audio only, or a still image format).
        MediaLimitError: ``resolution_too_large``: its frames are larger than FFmpeg decodes.
    """
    out = _run_ffprobe(["-show_format", "-show_streams", "-of", "json", str(path)])
    data = json.loads(out or "{}")
    streams: list[dict[str, Any]] = data.get("streams", [])
    fmt: dict[str, Any] = data.get("format", {})
    video = next(
        (s for s in streams if s.get("codec_type") == "video" and not s.get("disposition", {}).get("attached_pic")),
        None,
    )
    if video is None:
        raise NotAVideoError("the target has no video stream")
    if fmt.get("format_name", "") in {"image2", "png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe", "gif"}:
        raise NotAVideoError(f"the target is an image ({fmt.get('format_name')}), not a video")
    width, height = int(video.get("width") or 0), int(video.get("height") or 0)
    if width <= 0 or height <= 0:
        raise NotAVideoError("the video stream has no frame size")
    rotation = _rotation(video)
    if rotation in (90, 270):
        width, height = height, width
    duration = float(video.get("duration") or fmt.get("duration") or 0.0)
    nb_frames = int(video["nb_frames"]) if str(video.get("nb_frames", "")).isdigit() else None
    rate = _rate(video.get("avg_frame_rate")) or _rate(video.get("r_frame_rate"))
    if rate is None:
        if nb_frames and duration > 0:
            rate = Fraction(nb_frames / duration).limit_denominator(1001)
        else:
            raise NotAVideoError("the video stream has no frame rate")
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    return MediaInfo(
        width=width,
        height=height,
        fps=f"{rate.numerator}/{rate.denominator}",
        duration=duration,
        frame_count=nb_frames,
        video_codec=str(video.get("codec_name", "")),
        pix_fmt=str(video.get("pix_fmt", "")),
        rotation=rotation,
        start_time=float(fmt.get("start_time") or video.get("start_time") or 0.0),
        has_audio=audio is not None,
        audio_codec=str(audio.get("codec_name")) if audio else None,
        container=str(fmt.get("format_name", "")),
    )


def frame_times(path: Path, *, declared: int | None = None) -> list[float]:
    """Presentation times (seconds) of every video frame, in display order; see :func:`frame_index`."""
    return frame_index(path, declared=declared)[0]


def frame_index(path: Path, *, declared: int | None = None) -> tuple[list[float], list[int]]:
    """Presentation times (seconds) of every video frame in display order, and the display indices of the
    keyframes (where decoding can start), read from packets (no decoding).

    Packets the demuxer marks as discarded (before an edit list's start) are not frames of the video.
    ``declared`` is the frame count the header states (``MediaInfo.frame_count``): a file with fewer packets
    than that ends early — a truncated upload, whose header still describes the whole video.

    Raises:
        UnreadableMediaError: ``media_truncated``: fewer packets than ``declared``.
    """
    out = _run_ffprobe(
        ["-select_streams", "v:0", "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", str(path)]
    )
    lines = [line for line in out.splitlines() if line.strip()]
    if declared is not None and len(lines) < declared:
        raise UnreadableMediaError(
            f"the file ends after {len(lines)} of the {declared} frames its header declares (truncated?)",
            code="media_truncated",
        )
    packets: list[tuple[float, bool]] = []
    for line in lines:
        pts, _, flags = line.partition(",")
        if not pts or pts == "N/A" or "D" in flags:
            continue
        packets.append((float(pts), "K" in flags))
    packets.sort()
    return [t for t, _ in packets], [i for i, (_, key) in enumerate(packets) if key]


_IMAGE_CODECS = frozenset({"mjpeg", "png", "webp", "bmp", "tiff", "jpeg2000", "jpegls"})


def probe_image(path: Path, label: str) -> None:
    """Check that ``path`` is a still image (JPEG, PNG, WebP, BMP, TIFF).

    Raises:
        SourceImageError: ffprobe cannot read it, or it is not a single still image.
    """
    from shared.errors import SourceImageError

    try:
        out = _run_ffprobe(["-show_streams", "-show_format", "-of", "json", str(path)])
    except (UnreadableMediaError, MediaLimitError) as exc:  # a source is readable or it is not: one code for both
        raise SourceImageError(f"{label} is not a readable image") from exc
    data = json.loads(out or "{}")
    streams = [s for s in data.get("streams", []) if s.get("codec_type") == "video"]
    if len(streams) != 1 or streams[0].get("codec_name") not in _IMAGE_CODECS:
        raise SourceImageError(f"{label} is not a still image")
    if int(streams[0].get("width") or 0) <= 0:
        raise SourceImageError(f"{label} has no pixels")
