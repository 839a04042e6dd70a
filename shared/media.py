"""Media probing with ffprobe: what the file is (:func:`probe`, :func:`probe_image`).

The API uses :func:`probe` to refuse what is not a video before anything is stored; where each video frame sits in
time is :mod:`workers.video.frame_scan`'s.

Every read of a user's file names the demuxers it may use (:data:`TARGET_DEMUXERS`, plain media containers) and
the protocols (``file`` and ``pipe``): playlists and scripts that open other files — HLS, DASH, ``ffconcat`` — are
refused before they open anything, whatever the file is called. Once probed, a target is read with its demuxer
forced (:func:`input_args`), so no later reader can pick another one.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from shared.errors import MediaFormatError, MediaLimitError, NotAVideoError, UnreadableMediaError
from shared.images import ImageHeader, read_header
from shared.processes import FFPROBE, capture

# The container families a render farm accepts, by their demuxers' first names (FFmpeg matches a whitelist entry
# against any of a demuxer's names: "mov" admits "mov,mp4,m4a,3gp,3g2,mj2"), and the extension each is stored with.
TARGET_DEMUXERS: tuple[str, ...] = ("mov", "matroska", "avi", "mpegts")
EXTENSIONS = {"mov": ".mp4", "matroska": ".mkv", "avi": ".avi", "mpegts": ".ts"}
# Single-image readers: probed too, so that a picture sent as the target is named as such; they open no other file.
_IMAGE_DEMUXERS: tuple[str, ...] = (
    "image2", "png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe", "tiff_pipe", "gif", "apng",
)  # fmt: skip
PROTOCOLS = "file,pipe"
# Frame rates outside this range are no video's (a broken or hostile header): refused.
MIN_FPS, MAX_FPS = Fraction(1, 10), Fraction(1000)
_REFUSED_FORMAT = re.compile(r"Format not on whitelist|Protocol '[^']*' not on whitelist|Unsafe file name")


def demuxer_of(container: str) -> str:
    """The demuxer to force for a probed ``format_name`` (``mov,mp4,m4a,3gp,3g2,mj2`` → ``mov``).

    Raises:
        MediaFormatError: the container is not one the farm reads.
    """
    first = container.split(",")[0]
    if first not in TARGET_DEMUXERS:
        raise MediaFormatError(f"the container {first or 'of the file'!r} is not one the farm reads")
    return first


def input_args(path: Path, demuxer: str | None = None, allowed: tuple[str, ...] = TARGET_DEMUXERS) -> list[str]:
    """ffmpeg/ffprobe options that open ``path`` as a plain local file with one of the ``allowed`` demuxers
    (``demuxer`` forced when given), ending with ``-i``.

    >>> input_args(Path("/in/target.mp4"), "mov")[-4:]
    ['-f', 'mov', '-i', 'file:/in/target.mp4']
    """
    forced = ["-f", demuxer] if demuxer else []
    return ["-protocol_whitelist", PROTOCOLS, "-format_whitelist", ",".join(allowed), *forced, "-i", f"file:{path}"]


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

    @property
    def demuxer(self) -> str:
        """The demuxer every reader of the file forces (see :func:`demuxer_of`)."""
        return demuxer_of(self.container)

    @property
    def extension(self) -> str:
        """The extension the file is stored with, chosen from its probed container."""
        return EXTENSIONS[self.demuxer]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MediaInfo:
        return cls(**data)


# FFmpeg refuses frames past its own size limit (about 16k x 16k) while reading the header; depending on the
# container the probe then fails or reports no size. Either way the file is too large, which is worth saying.
_INVALID_SIZE = re.compile(r"Picture size (\d+)x(\d+) is invalid")
PROBE_TIMEOUT = 120.0


def _run_ffprobe(args: list[str], timeout: float = PROBE_TIMEOUT) -> str:
    """ffprobe's output.

    Raises:
        FfmpegError: ``ffmpeg_missing``: ffprobe is not installed.
        MediaFormatError: the file is a format outside the whitelist the arguments name.
        MediaLimitError: ``resolution_too_large``: the file declares frames larger than FFmpeg decodes.
        UnreadableMediaError: ffprobe cannot read the file.
    """
    try:
        done = capture([FFPROBE, "-v", "error", *args], timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise UnreadableMediaError("ffprobe timed out reading the file") from exc
    check_stderr(done.stderr.decode(errors="replace"))
    if done.returncode != 0:
        raise UnreadableMediaError("not a readable media file")
    return done.stdout.decode(errors="replace")


def check_stderr(stderr: str) -> None:
    if _REFUSED_FORMAT.search(stderr):
        raise MediaFormatError(
            "the file is not a plain media file the farm reads (MP4/MOV, Matroska/WebM, AVI or MPEG-TS); "
            "playlists, manifests and scripts that name other files are refused"
        )
    if oversized := _INVALID_SIZE.search(stderr):
        width, height = oversized.groups()
        raise MediaLimitError(
            f"the file declares frames of {width}x{height}, larger than can be decoded", code="resolution_too_large"
        )


def as_number(value: Any) -> float | None:
    """A finite number from ffprobe's JSON (which writes numbers as strings), else ``None``."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _rotation(stream: dict[str, Any]) -> int:
    """The rotation the stream declares, in degrees.

    Raises:
        UnreadableMediaError: ``media_metadata_invalid``: the rotation is not a number.
    """
    for side in stream.get("side_data_list", []):
        if "rotation" in side:
            degrees = as_number(side["rotation"])
            if degrees is None:
                raise UnreadableMediaError("the video's rotation is not a number", code="media_metadata_invalid")
            return int(round(degrees)) % 360
    tag = stream.get("tags", {}).get("rotate")
    if not tag:
        return 0
    degrees = as_number(tag)
    if degrees is None:
        raise UnreadableMediaError("the video's rotation tag is not a number", code="media_metadata_invalid")
    return int(round(degrees)) % 360


def _rate(value: str | None) -> Fraction | None:
    """A frame rate within :data:`MIN_FPS` … :data:`MAX_FPS`, or ``None`` (unset, zero, negative, absurd)."""
    if not value or value in {"0/0", "0/1"}:
        return None
    try:
        rate = Fraction(value)
    except (ValueError, ZeroDivisionError):
        return None
    return rate if MIN_FPS <= rate <= MAX_FPS else None


def probe(path: Path, demuxer: str | None = None) -> MediaInfo:
    """Describe the first video stream of ``path``, read with ``demuxer`` (forced) or one of the whitelist's.

    Raises:
        MediaFormatError: ``media_format_refused``: not a container the farm reads (a playlist, a script …).
        UnreadableMediaError: ffprobe cannot read the file at all, or its metadata is nonsense
            (``media_metadata_invalid``: a rotation that is not a number; ``media_duration_invalid``).
        NotAVideoError: the file has no video stream (audio only, or a still image), or no usable frame rate
            (``media_rate_invalid``: none, zero, or outside 0.1–1000 fps).
        MediaLimitError: ``resolution_too_large``: its frames are larger than FFmpeg decodes.
    """
    allowed = (demuxer,) if demuxer else TARGET_DEMUXERS + _IMAGE_DEMUXERS
    out = _run_ffprobe(["-show_format", "-show_streams", "-of", "json", *input_args(path, demuxer, allowed)])
    try:
        data = json.loads(out or "{}")
    except json.JSONDecodeError as exc:
        raise UnreadableMediaError("not a readable media file") from exc
    streams: list[dict[str, Any]] = data.get("streams", [])
    fmt: dict[str, Any] = data.get("format", {})
    container = str(fmt.get("format_name", ""))
    if container.split(",")[0] in _IMAGE_DEMUXERS:
        raise NotAVideoError(f"the target is an image ({container}), not a video")
    demuxer_of(container)  # the whitelist admitted it; this names the one the workers force
    video = next(
        (s for s in streams if s.get("codec_type") == "video" and not s.get("disposition", {}).get("attached_pic")),
        None,
    )
    if video is None:
        raise NotAVideoError("the target has no video stream")
    width, height = int(as_number(video.get("width")) or 0), int(as_number(video.get("height")) or 0)
    if width <= 0 or height <= 0:
        raise NotAVideoError("the video stream has no frame size")
    rotation = _rotation(video)
    if rotation in (90, 270):
        width, height = height, width
    duration = as_number(video.get("duration"))
    if duration is None:
        duration = as_number(fmt.get("duration"))
    if duration is not None and duration < 0:
        raise UnreadableMediaError("the video declares a negative duration", code="media_duration_invalid")
    duration = duration or 0.0
    nb_frames = int(video["nb_frames"]) if str(video.get("nb_frames", "")).isdigit() else None
    rate = _rate(video.get("avg_frame_rate")) or _rate(video.get("r_frame_rate"))
    if rate is None and nb_frames and duration > 0:
        rate = _rate(str(Fraction(nb_frames / duration).limit_denominator(1001)))
    if rate is None:
        raise NotAVideoError(
            f"the video stream has no usable frame rate (between {float(MIN_FPS):g} and {float(MAX_FPS):g} fps)",
            code="media_rate_invalid",
        )
    audio = next((s for s in streams if s.get("codec_type") == "audio"), None)
    start = as_number(fmt.get("start_time"))
    if start is None:
        start = as_number(video.get("start_time"))
    return MediaInfo(
        width=width,
        height=height,
        fps=f"{rate.numerator}/{rate.denominator}",
        duration=duration,
        frame_count=nb_frames,
        video_codec=str(video.get("codec_name", "")),
        pix_fmt=str(video.get("pix_fmt", "")),
        rotation=rotation,
        start_time=start or 0.0,
        has_audio=audio is not None,
        audio_codec=str(audio.get("codec_name")) if audio else None,
        container=container,
    )


_IMAGE_CODECS = frozenset({"mjpeg", "png", "webp", "bmp", "tiff"})


def probe_image(path: Path, label: str, *, max_pixels: int | None = None) -> ImageHeader:
    """Check that ``path`` is one still image (JPEG, PNG, WebP, BMP, TIFF) of at most ``max_pixels`` pixels.

    The size comes from the header (:func:`shared.images.read_header`) and is checked before anything decodes
    the image; ffprobe then reads it with the header's single-image demuxer forced and counts its packets.

    Raises:
        SourceImageError: not a readable still image (``source_invalid``), or more pixels than ``max_pixels``
            (``source_resolution_too_large``).
    """
    from shared.errors import SourceImageError

    header = read_header(path)
    if header is None:
        raise SourceImageError(f"{label} is not a still image (JPEG, PNG, WebP, BMP or TIFF)")
    if max_pixels is not None and header.pixels > max_pixels:
        raise SourceImageError(
            f"{label} declares {header.width}x{header.height} pixels; the limit is {max_pixels} pixels",
            code="source_resolution_too_large",
        )
    args = ["-count_packets", "-show_streams", "-of", "json", *input_args(path, header.demuxer, (header.demuxer,))]
    try:
        out = _run_ffprobe(args)
        data = json.loads(out or "{}")
    except (UnreadableMediaError, MediaLimitError, MediaFormatError, json.JSONDecodeError) as exc:
        raise SourceImageError(f"{label} is not a readable image") from exc
    streams = [s for s in data.get("streams", []) if s.get("codec_type") == "video"]
    if len(streams) != 1 or streams[0].get("codec_name") not in _IMAGE_CODECS:
        raise SourceImageError(f"{label} is not a still image")
    if str(streams[0].get("nb_read_packets")) != "1":
        raise SourceImageError(f"{label} holds several images; a source is one still image")
    if int(as_number(streams[0].get("width")) or 0) <= 0:
        raise SourceImageError(f"{label} has no pixels")
    return header
