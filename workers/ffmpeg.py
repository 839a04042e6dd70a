"""ffmpeg command lines, built by pure functions (tested without running ffmpeg), and the one place they run.

Frames travel as raw video over pipes: decode → processors → encode, never through image files. On the pipes
they are ``yuv420p`` where the size allows (half the bytes of BGR, and no conversion inside ffmpeg, whose
converter is single-threaded); the frame I/O converts to and from BGR for the processors.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from shared.errors import FfmpegError
from shared.media import input_args
from shared.options import EncoderOptions
from shared.processes import StderrTail, child_env

logger = logging.getLogger(__name__)

FFMPEG = "ffmpeg"
_BASE = [FFMPEG, "-hide_banner", "-nostdin", "-loglevel", "error", "-y"]
PROVENANCE_TAG = "synthetic_content"
PROVENANCE_TEXT = "This video contains synthetic, face-swapped content made with swapfarm."
# Containers that carry these audio codecs by stream copy; anything else is re-encoded to AAC.
_MP4_AUDIO = frozenset({"aac", "mp3", "ac3", "eac3", "opus", "alac", "flac"})


def pipe_format(width: int, height: int) -> str:
    """The raw pixel format frames travel in: 4:2:0 needs even sizes; odd-sized frames go as BGR."""
    return "yuv420p" if width % 2 == 0 and height % 2 == 0 else "bgr24"


def _input(source: Path, demuxer: str | None) -> list[str]:
    """Open a user's file as a plain local file, with the demuxer its probe found forced (``shared.media``)."""
    return input_args(source, demuxer)


def decode_args(
    source: Path,
    seek_seconds: float,
    frames: int,
    pix_fmt: str = "bgr24",
    *,
    demuxer: str | None = None,
    hwaccel: str | None = None,
) -> list[str]:
    """Read ``frames`` frames starting at ``seek_seconds`` as raw BGR on stdout.

    ``-ss`` before ``-i`` seeks to the keyframe before the position and decodes from there, dropping the frames
    before it (accurate seek), so a chunk never decodes from the start of the video. Frames are passed through
    as decoded (no duplication or dropping), and rotation metadata is applied so frames are upright. The input is
    read with ``demuxer`` (the probed one) and local files only. ``hwaccel`` (``cuda``, where the worker's probe
    decoded with it: :mod:`workers.codecs`) decodes on the device and hands the frames back to system memory.
    """
    seek = ["-ss", f"{seek_seconds:.6f}"] if seek_seconds > 0 else []
    accel = ["-hwaccel", hwaccel] if hwaccel else []
    return [
        *_BASE,
        *accel,
        *seek,
        *_input(source, demuxer),
        "-map",
        "0:v:0",
        "-frames:v",
        str(frames),
        "-fps_mode",
        "passthrough",
        "-f",
        "rawvideo",
        "-pix_fmt",
        pix_fmt,
        "pipe:1",
    ]


def _pixel_format(width: int, height: int) -> str:
    # The frames are 4:2:0 on the pipe already (so "lossless" is lossless from there); odd-sized frames, which
    # 4:2:0 cannot hold, keep their size in 4:4:4 instead of being cropped.
    return "yuv444p" if width % 2 or height % 2 else "yuv420p"


def _quality_args(options: EncoderOptions) -> list[str]:
    crf = str(options.crf())
    match options.encoder:
        case "libx264" | "libx265":
            preset = ["-preset", options.preset]
            return [*preset, "-qp", "0"] if options.lossless else [*preset, "-crf", crf]
        case "libvpx-vp9":
            return ["-lossless", "1"] if options.lossless else ["-crf", crf, "-b:v", "0", "-row-mt", "1"]
        case "libsvtav1":
            return ["-crf", "0" if options.lossless else crf, "-preset", "8"]
        case "h264_nvenc" | "hevc_nvenc":
            return ["-tune", "lossless"] if options.lossless else ["-rc", "vbr", "-cq", crf]


def encode_args(
    output: Path, width: int, height: int, fps: str, options: EncoderOptions, pix_fmt: str = "bgr24"
) -> list[str]:
    """Encode raw BGR frames from stdin at a constant ``fps`` into ``output`` (video only)."""
    return [
        *_BASE,
        "-f",
        "rawvideo",
        "-pix_fmt",
        pix_fmt,
        "-s",
        f"{width}x{height}",
        "-r",
        fps,
        "-i",
        "pipe:0",
        "-c:v",
        options.encoder,
        *_quality_args(options),
        "-pix_fmt",
        _pixel_format(width, height),
        "-an",
        "-f",
        "mp4",
        str(output),
    ]


def transcode_args(
    source: Path,
    seek_seconds: float,
    frames: int,
    output: Path,
    width: int,
    height: int,
    fps: str,
    options: EncoderOptions,
    *,
    demuxer: str | None = None,
) -> list[str]:
    """Decode and encode a chunk in one ffmpeg process, for processor chains that never touch pixels.

    The frames are renumbered onto the constant ``fps`` grid (time base 1/fps, pts = frame index), exactly as
    the piped path's raw input is timed, so the chunk concatenates with its neighbours the same way. Progress
    (``frame=N`` lines) goes to stdout.
    """
    num, _, den = fps.partition("/")
    seek = ["-ss", f"{seek_seconds:.6f}"] if seek_seconds > 0 else []
    return [
        *_BASE,
        "-progress",
        "pipe:1",
        "-nostats",
        *seek,
        *_input(source, demuxer),
        "-map",
        "0:v:0",
        "-frames:v",
        str(frames),
        "-vf",
        f"settb={den or 1}/{num},setpts=N",
        "-fps_mode",
        "passthrough",
        "-r",
        fps,
        "-c:v",
        options.encoder,
        *_quality_args(options),
        "-pix_fmt",
        _pixel_format(width, height),
        "-an",
        "-f",
        "mp4",
        str(output),
    ]


def concat_list(paths: list[Path]) -> str:
    """The concat demuxer's list file: one ``file`` line per chunk, quotes escaped."""
    lines = []
    for path in paths:
        escaped = str(path.resolve()).replace("'", "'\\''")
        lines.append(f"file '{escaped}'")
    return "\n".join(lines) + "\n"


def stitch_args(
    list_file: Path,
    audio_source: Path | None,
    audio_codec: str | None,
    output: Path,
    *,
    provenance: bool,
    audio_demuxer: str | None = None,
) -> list[str]:
    """Concatenate the chunk files (ours) by stream copy and take the audio once from the original input (the
    user's, read with its probed demuxer)."""
    return _mux_args(
        ["-f", "concat", "-safe", "0", "-i", str(list_file)], audio_source, audio_codec, output, provenance,
        audio_demuxer,
    )  # fmt: skip


def concat_video_args(list_file: Path, output: Path) -> list[str]:
    """Concatenate the chunk files by stream copy into an MP4 whose index follows its media (no faststart).

    The index can then change size without moving a sample (see :mod:`workers.mp4_timing`).
    """
    return [*_BASE, "-f", "concat", "-safe", "0", "-i", str(list_file), "-map", "0:v:0", "-c:v", "copy",
            "-f", "mp4", str(output)]  # fmt: skip


def remux_args(
    video: Path,
    audio_source: Path | None,
    audio_codec: str | None,
    output: Path,
    *,
    provenance: bool,
    audio_demuxer: str | None = None,
) -> list[str]:
    """Copy ``video``'s video (timing as it is) and take the audio once from the original input."""
    return _mux_args(["-i", str(video)], audio_source, audio_codec, output, provenance, audio_demuxer)


def _mux_args(
    video_input: list[str],
    audio_source: Path | None,
    audio_codec: str | None,
    output: Path,
    provenance: bool,
    audio_demuxer: str | None = None,
) -> list[str]:
    args = [*_BASE, *video_input]
    if audio_source is not None:
        args += [*_input(audio_source, audio_demuxer), "-map", "0:v:0", "-map", "1:a:0?"]
        args += ["-c:a", "copy" if audio_codec in _MP4_AUDIO else "aac"]
    else:
        args += ["-map", "0:v:0"]
    args += ["-c:v", "copy", "-movflags", "+faststart+use_metadata_tags"]
    if provenance:
        args += ["-metadata", f"{PROVENANCE_TAG}=face-swapped", "-metadata", f"comment={PROVENANCE_TEXT}"]
    args += ["-f", "mp4", str(output)]
    return args


def run(args: list[str], *, what: str, timeout: float | None = None) -> None:
    """Run an ffmpeg command to completion, with the minimal environment of a child (``shared.processes``) and its
    stderr drained into a bounded buffer.

    Raises:
        FfmpegError: ffmpeg is missing, timed out or exited non-zero; the message keeps stderr's tail.
    """
    logger.debug("running %s", args)
    try:
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=child_env()
        )
    except FileNotFoundError as exc:
        raise FfmpegError("ffmpeg is not installed", code="ffmpeg_missing") from exc
    assert proc.stderr is not None
    stderr = StderrTail(proc.stderr, name="ffmpeg-stderr")
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise FfmpegError(f"{what}: ffmpeg timed out") from exc
    finally:
        stderr.join()
        proc.stderr.close()
    if code != 0:
        raise FfmpegError(f"{what}: ffmpeg exited with {code}", stderr=stderr.text())
