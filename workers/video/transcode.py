"""A chunk that no processor looks at: decoded and encoded in one ffmpeg process (no frame through Python), its
progress followed from ffmpeg's ``-progress`` lines, stopped when its owner lets go or when no frame comes out."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.errors import FfmpegError, LeaseLostError
from shared.options import EncoderOptions
from workers.video import ffmpeg
from workers.video.frame_scan import frame_times

__all__ = ["Span", "transcode"]


@dataclass(frozen=True)
class Span:
    """The frames to transcode: ``frames`` from ``seek_seconds`` of ``source``, at ``width`` × ``height``."""

    source: Path
    seek_seconds: float
    frames: int
    width: int
    height: int
    fps: str
    demuxer: str | None = None
    scale: bool = False


def transcode(
    span: Span,
    output: Path,
    encoder: EncoderOptions,
    progress: list[int],
    *,
    alive: Callable[[], bool],
    what: str,
    stall_seconds: float | None = None,
) -> None:
    """Transcode ``span`` into ``output``, counting frames encoded in ``progress[0]``. Its stderr is drained as it
    comes.

    Raises:
        LeaseLostError: ``alive()`` turned false (the lease was lost or the job cancelled); ffmpeg is stopped.
        FfmpegError: ffmpeg failed; ``chunk_stalled`` when no frame came out for ``stall_seconds``;
            ``media_truncated`` when the output holds fewer frames than asked for.
    """
    args = ffmpeg.transcode_args(
        span.source, span.seek_seconds, span.frames, output, span.width, span.height, span.fps, encoder,
        demuxer=span.demuxer, scale=span.scale,
    )  # fmt: skip
    proc, stderr = ffmpeg.start(args, name="transcode-stderr", stdout=True)
    with proc:
        follower = threading.Thread(target=_follow, args=(proc, progress), name="transcode-progress", daemon=True)
        follower.start()
        seen, moved_at = progress[0], time.monotonic()
        while True:
            try:
                proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if not alive():
                    proc.kill()
                    raise LeaseLostError(f"{what}: lease lost or job cancelled") from None
                if progress[0] != seen:
                    seen, moved_at = progress[0], time.monotonic()
                elif stall_seconds is not None and time.monotonic() - moved_at > stall_seconds:
                    proc.kill()
                    raise FfmpegError(
                        f"no frame came out of the decoder for {stall_seconds:.0f}s (after {seen} of {span.frames}); "
                        "the chunk was stopped",
                        stderr=stderr.text(timeout=1),
                        code="chunk_stalled",
                    ) from None
        follower.join()
    if proc.returncode != 0:
        raise FfmpegError(f"transcoding failed (exit {proc.returncode})", stderr=stderr.text())
    produced = len(frame_times(output))
    if produced != span.frames:
        raise FfmpegError(f"decoding ended after {produced} of {span.frames} frames", code="media_truncated")


def _follow(proc: subprocess.Popen[bytes], progress: list[int]) -> None:
    """Read ffmpeg's ``-progress`` lines into ``progress[0]`` (frames encoded so far)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        key, _, value = line.decode(errors="replace").strip().partition("=")
        if key == "frame" and value.isdigit():
            progress[0] = int(value)
