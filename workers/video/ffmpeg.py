"""ffmpeg command lines, built by pure functions (tested without running ffmpeg); they run through
:func:`start` and :func:`run` (``shared.processes``: the one place ffmpeg and ffprobe start).

The command lines are built as typed-ffmpeg graphs (inputs, filters, outputs) and compiled to argument lists,
never to a shell string. Every user's file is opened through :func:`_open`, which takes its options from
``shared.media.input_args`` — local-file protocols only, the container whitelist, the probed demuxer forced — so
the protections are defined once for ffprobe and ffmpeg alike. Our own intermediate files (chunks, the concat
list) are opened as they are.

Frames travel as raw video over pipes: decode → processors → encode, never through image files. On the pipes
they are ``yuv420p`` where the size allows (half the bytes of BGR, and no conversion inside ffmpeg, whose
converter is single-threaded); the frame I/O converts to and from BGR for the processors.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import ffmpeg as graph  # typed-ffmpeg: builds the command lines
from ffmpeg import AudioStream, AVStream, VideoStream
from ffmpeg.dag.nodes import OutputStream

from shared.containers import MP4, Container, container_of
from shared.media import input_args
from shared.options import EncoderOptions
from shared.processes import FFMPEG, run, start
from workers.video.encoders import video_codec

__all__ = [
    "FFMPEG", "MUXER", "MUXER_DEMUXER", "AudioCut", "Resample", "concat_list", "concat_video_args", "decode_args",
    "encode_args", "pipe_format", "remux_args", "run", "scale_filter", "start", "still_args", "stitch_args",
    "transcode_args",
]  # fmt: skip

PROVENANCE_TAG = "synthetic_content"
# The container of what the farm writes (chunks, the stitch, the output) is the job's (shared.containers: MP4, or
# MOV for ProRes); the concat demuxer joins either by stream copy, workers.video.mp4_timing rewrites either's index,
# and both are read back with the demuxer probes name "mov".
MUXER = MP4.muxer
MUXER_DEMUXER = MP4.demuxer
PROVENANCE_TEXT = "This video contains synthetic, face-swapped content made with swapfarm."


def pipe_format(width: int, height: int, *, alpha: bool = False) -> str:
    """The raw pixel format frames travel in: 4:2:0 needs even sizes; odd-sized frames go as BGR. With ``alpha``
    (frames with a matte, to the encoder only) the same with an alpha plane after the colour.

    >>> pipe_format(64, 36), pipe_format(65, 36), pipe_format(64, 36, alpha=True), pipe_format(65, 36, alpha=True)
    ('yuv420p', 'bgr24', 'yuva420p', 'bgra')
    """
    if width % 2 == 0 and height % 2 == 0:
        return "yuva420p" if alpha else "yuv420p"
    return "bgra" if alpha else "bgr24"


def _compile(output: OutputStream, *, progress: bool = False) -> list[str]:
    """The argument list of ``output``: quiet but for errors, no reading of stdin, overwriting the output;
    with ``progress``, ``key=value`` progress lines on stdout instead of the stats line."""
    tracked: dict[str, Any] = {"progress": "pipe:1", "stats": False} if progress else {}
    quiet = output.global_args(hide_banner=True, stdin=False, loglevel="error", **tracked)
    return quiet.compile(cmd=FFMPEG, overwrite_output=True)


def _open(
    source: Path, demuxer: str | None, *, seek: float = 0.0, seconds: float | None = None, hwaccel: str | None = None
) -> AVStream:
    """Open a user's file as a plain local file, with the demuxer its probe found forced: the options of
    ``shared.media.input_args``, exactly. ``seek`` (input seeking, from the file's start) and ``seconds`` (how
    much to read) are left out when unset."""
    *options, flag, url = input_args(source, demuxer)
    if flag != "-i" or len(options) % 2:
        raise ValueError(f"unexpected input options {options}")
    named = {key.removeprefix("-"): value for key, value in zip(options[::2], options[1::2], strict=True)}
    forced = named.pop("f", None)
    if hwaccel:
        named["hwaccel"] = hwaccel
    return graph.input(
        url,
        f=forced,
        ss=f"{seek:.6f}" if seek > 0 else None,
        t=f"{seconds:.6f}" if seconds is not None else None,
        extra_options=named,
    )


def scale_filter(stream: VideoStream, size: tuple[int, int] | None) -> VideoStream:
    """``stream`` scaled to ``size`` (width, height; after rotation) with the bicubic scaler, or as it is."""
    return stream if size is None else stream.scale(w=size[0], h=size[1], flags="bicubic")


def decode_args(
    source: Path,
    seek_seconds: float,
    frames: int,
    pix_fmt: str = "bgr24",
    *,
    demuxer: str | None = None,
    hwaccel: str | None = None,
    size: tuple[int, int] | None = None,
) -> list[str]:
    """Read ``frames`` frames starting at ``seek_seconds`` as raw BGR on stdout.

    ``-ss`` before ``-i`` seeks to the keyframe before the position and decodes from there, dropping the frames
    before it (accurate seek), so a chunk never decodes from the start of the video. Frames are passed through
    as decoded (no duplication or dropping), and rotation metadata is applied so frames are upright. The input is
    read with ``demuxer`` (the probed one) and local files only. With ``size``, frames are scaled to it.
    ``hwaccel`` (``cuda``, where the worker's probe decoded with it: :mod:`workers.video.codecs`) decodes on the
    device and hands the frames back to system memory.
    """
    video = scale_filter(_open(source, demuxer, seek=seek_seconds, hwaccel=hwaccel).video_stream(0), size)
    raw = video.output(
        filename="pipe:1", f="rawvideo", pix_fmt=pix_fmt, extra_options={"frames:v": frames, "fps_mode": "passthrough"}
    )
    return _compile(raw)


def encode_args(
    output: Path,
    width: int,
    height: int,
    fps: str,
    options: EncoderOptions,
    pix_fmt: str = "bgr24",
    *,
    alpha: bool = False,
) -> list[str]:
    """Encode raw frames (``pix_fmt``) from stdin at a constant ``fps`` into ``output`` (video only), in the
    encoder's container; with ``alpha`` the frames carry an alpha plane and the encoder keeps it."""
    raw = graph.input("pipe:0", f="rawvideo", pix_fmt=pix_fmt, s=f"{width}x{height}", r=fps)
    codec = video_codec(options, width, height, alpha=alpha)
    muxer = container_of(options.encoder).muxer
    encoded = raw.video_stream(0).output(filename=str(output), f=muxer, an=True, extra_options=codec)
    return _compile(encoded)


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
    scale: bool = False,
) -> list[str]:
    """Decode and encode a chunk in one ffmpeg process, for processor chains that never touch pixels.

    The frames are renumbered onto the constant ``fps`` grid (time base 1/fps, pts = frame index), exactly as
    the piped path's raw input is timed, so the chunk concatenates with its neighbours the same way. With
    ``scale``, they are scaled to ``width`` x ``height`` as the piped path's decoder scales them. Progress
    (``frame=N`` lines) goes to stdout.
    """
    num, _, den = fps.partition("/")
    video = _open(source, demuxer, seek=seek_seconds).video_stream(0)
    video = scale_filter(video, (width, height) if scale else None)
    video = video.settb(expr=f"{den or 1}/{num}").setpts(expr="N")
    encoded = video.output(
        filename=str(output),
        f=container_of(options.encoder).muxer,
        an=True,
        r=fps,
        extra_options={"frames:v": frames, "fps_mode": "passthrough", **video_codec(options, width, height)},
    )
    return _compile(encoded, progress=True)


def concat_list(paths: list[Path]) -> str:
    """The concat demuxer's list file: one ``file`` line per chunk, quotes escaped."""
    lines = []
    for path in paths:
        escaped = str(path.resolve()).replace("'", "'\\''")
        lines.append(f"file '{escaped}'")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class AudioCut:
    """The part of the input's audio a trimmed job keeps: from ``start`` seconds (relative to the file's start,
    as ``-ss`` counts) for ``seconds`` (``None``: to its end). A cut audio is re-encoded to AAC: decoding lets
    FFmpeg cut at the sample, where a stream copy could only cut between packets (about 21 ms of AAC)."""

    start: float
    seconds: float | None


@dataclass(frozen=True)
class Resample:
    """Re-encode the stitched video onto a constant ``rate`` grid (FFmpeg's ``fps`` filter) with ``encoder`` (and
    its alpha plane, with ``alpha``)."""

    rate: Fraction
    width: int
    height: int
    encoder: EncoderOptions
    alpha: bool = False


def _chunks(list_file: Path) -> AVStream:
    """The chunk files (ours) named in ``list_file``, read one after the other by the concat demuxer."""
    return graph.input(str(list_file), f="concat", extra_options={"safe": 0})


def stitch_args(
    list_file: Path,
    audio_source: Path | None,
    audio_codec: str | None,
    output: Path,
    *,
    provenance: bool,
    audio_demuxer: str | None = None,
    audio_cut: AudioCut | None = None,
    resample: Resample | None = None,
    container: Container = MP4,
) -> list[str]:
    """Concatenate the chunk files (ours) by stream copy and take the audio once from the original input (the
    user's, read with its probed demuxer): all of it, or the ``audio_cut`` of a trimmed job. With ``resample``
    the video is re-encoded at another rate instead of copied. Written in ``container``, the chunks'."""
    return _mux_args(
        _chunks(list_file), audio_source, audio_codec, output, provenance, audio_demuxer, audio_cut, resample,
        container,
    )  # fmt: skip


def concat_video_args(list_file: Path, output: Path, container: Container = MP4) -> list[str]:
    """Concatenate the chunk files by stream copy into a file of ``container`` (the chunks') whose index follows
    its media (no faststart).

    The index can then change size without moving a sample (see :mod:`workers.video.mp4_timing`).
    """
    copied = (
        _chunks(list_file)
        .video_stream(0)
        .output(filename=str(output), f=container.muxer, extra_options={"c:v": "copy"})
    )
    return _compile(copied)


def remux_args(
    video: Path,
    audio_source: Path | None,
    audio_codec: str | None,
    output: Path,
    *,
    provenance: bool,
    audio_demuxer: str | None = None,
    audio_cut: AudioCut | None = None,
    resample: Resample | None = None,
    container: Container = MP4,
) -> list[str]:
    """Copy ``video``'s video (timing as it is; or ``resample`` it) and take the audio once from the original
    input (or its ``audio_cut``), into ``container``."""
    ours = graph.input(str(video))
    return _mux_args(ours, audio_source, audio_codec, output, provenance, audio_demuxer, audio_cut, resample, container)


def _mux_args(
    video_input: AVStream,
    audio_source: Path | None,
    audio_codec: str | None,
    output: Path,
    provenance: bool,
    audio_demuxer: str | None = None,
    audio_cut: AudioCut | None = None,
    resample: Resample | None = None,
    container: Container = MP4,
) -> list[str]:
    video: VideoStream = video_input.video_stream(0)
    options: dict[str, Any] = {"c:v": "copy"}
    if resample is not None:
        rate = resample.rate
        video = video.fps(fps=f"{rate.numerator}/{rate.denominator}")
        options = video_codec(resample.encoder, resample.width, resample.height, alpha=resample.alpha)
    streams: list[VideoStream | AudioStream] = [video]
    if audio_source is not None:
        start = audio_cut.start if audio_cut is not None else 0.0
        seconds = audio_cut.seconds if audio_cut is not None else None
        audio = _open(audio_source, audio_demuxer, seek=start, seconds=seconds)
        streams.append(audio.audio_stream(0, optional=True))
        options["c:a"] = "copy" if audio_codec in container.audio_copy and audio_cut is None else "aac"
    options["movflags"] = "+faststart+use_metadata_tags"
    if provenance:  # two global tags: "-metadata" and "-metadata:g" name the same (global) metadata
        options["metadata"] = f"{PROVENANCE_TAG}=face-swapped"
        options["metadata:g"] = f"comment={PROVENANCE_TEXT}"
    return _compile(graph.output(*streams, filename=str(output), f=container.muxer, extra_options=options))


def still_args(source: Path, seek: float, output: Path, demuxer: str, *, max_width: int) -> list[str]:
    """One frame of a user's ``source`` at ``seek`` (read with ``demuxer`` forced) as a JPEG at most ``max_width``
    wide, keeping the aspect (an even height)."""
    frame = _open(source, demuxer, seek=seek).video_stream(0).scale(w=f"min({max_width},iw)", h=-2)
    jpeg = frame.output(filename=str(output), f="image2", extra_options={"frames:v": 1, "q:v": 3, "c:v": "mjpeg"})
    return _compile(jpeg)
