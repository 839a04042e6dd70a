"""Frames through ffmpeg pipes, with decoding and encoding overlapped with the processors.

:class:`FrameReader` decodes ahead on a thread into a bounded queue; :class:`FrameWriter` encodes behind on a
thread from a bounded queue. The processors in between never wait for ffmpeg unless a queue is empty or full.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import cv2
import numpy as np

from shared.errors import FfmpegError
from shared.options import EncoderOptions
from shared.processes import StderrTail
from workers.processors.base import FrameBatch
from workers.video.ffmpeg import decode_args, encode_args, pipe_format, start

_DONE = object()


def _read_into(stream: IO[bytes], buffer: memoryview) -> int:
    """Fill ``buffer`` from ``stream`` (no intermediate copies); returns the bytes read, short only at the end."""
    got = 0
    while got < len(buffer):
        count = stream.readinto(buffer[got:])  # type: ignore[attr-defined]  # a pipe's BufferedReader has it
        if not count:
            break
        got += count
    return got


def _to_bgr(raw: FrameBatch) -> FrameBatch:
    out = np.empty((len(raw), raw.shape[1] * 2 // 3, raw.shape[2], 3), np.uint8)
    for i, frame in enumerate(raw):
        cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420, dst=out[i])
    return out


def _to_yuv420p(frames: FrameBatch) -> FrameBatch:
    out = np.empty((len(frames), frames.shape[1] * 3 // 2, frames.shape[2]), np.uint8)
    for i, frame in enumerate(frames):
        cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420, dst=out[i])
    return out


def _to_yuva420p(frames: FrameBatch) -> FrameBatch:
    """BGRA frames ``[N, H, W, 4]`` as FFmpeg's ``yuva420p``: the colour's 4:2:0 planes, then the alpha plane."""
    height = frames.shape[1]
    out = np.empty((len(frames), height * 5 // 2, frames.shape[2]), np.uint8)
    for i, frame in enumerate(frames):
        cv2.cvtColor(frame, cv2.COLOR_BGRA2YUV_I420, dst=out[i, : height * 3 // 2])
        out[i, height * 3 // 2 :] = frame[..., 3]
    return out


def split_frames(batches: Iterable[FrameBatch], count: int) -> tuple[Iterator[FrameBatch], Iterator[FrameBatch]]:
    """``batches`` as two iterators over the same frames: the first ``count`` frames, then the rest (a chunk's
    look-behind, then its own frames, out of one decoder). Read the first before the second; the second skips
    whatever of the first was left unread.

    >>> head, tail = split_frames([np.arange(3), np.arange(3, 6)], 4)
    >>> [b.tolist() for b in head], [b.tolist() for b in tail]
    ([[0, 1, 2], [3]], [[4, 5]])
    """
    source = iter(batches)
    carried: list[FrameBatch] = []

    def first() -> Iterator[FrameBatch]:
        left = count
        for batch in source if left else ():
            if len(batch) > left:
                carried.append(batch[left:])
                batch = batch[:left]
            left -= len(batch)
            yield batch
            if not left:
                return

    head = first()

    def rest() -> Iterator[FrameBatch]:
        for _ in head:  # what the look-behind's reader left
            pass
        yield from carried
        yield from source

    return head, rest()


class FrameReader:
    """Decode ``frames`` frames from ``seek_seconds`` in batches of ``batch_size``, ``depth`` batches ahead.

    Batches are BGR ``[N, H, W, 3]``: ``width`` x ``height`` is the video's displayed size, or the size the
    decoder scales the frames to with ``scale``. ``extra`` more frames are read where the file has them (a chunk's
    look-ahead); ``optional`` makes every frame so (a look-behind: context, never output).

    Raises (on iteration):
        FfmpegError: ffmpeg failed, or the file ended before ``frames`` frames were read.
    """

    def __init__(
        self,
        source: Path,
        *,
        seek_seconds: float,
        frames: int,
        width: int,
        height: int,
        batch_size: int,
        depth: int = 2,
        demuxer: str | None = None,
        stall_seconds: float | None = None,
        extra: int = 0,
        optional: bool = False,
        hwaccel: str | None = None,
        scale: bool = False,
        planes: bool = False,
    ) -> None:
        self._format = pipe_format(width, height)
        if planes and self._format != "yuv420p":
            raise ValueError(f"{width}x{height} frames cannot travel as 4:2:0 planes")
        self._convert = self._format == "yuv420p" and not planes
        size = (width, height) if scale else None
        self._args = decode_args(
            source, seek_seconds, frames + extra, self._format, demuxer=demuxer, hwaccel=hwaccel, size=size
        )
        self._required = 0 if optional else frames
        frames += extra
        self._stall = stall_seconds
        self._stderr: StderrTail | None = None
        self._frames, self._shape, self._batch = frames, (height, width, 3), batch_size
        # the shape of one frame as it arrives on the pipe: planar 4:2:0 is 1.5 rows of bytes per row
        self._raw_shape = (height * 3 // 2, width) if self._format == "yuv420p" else self._shape
        self._queue: queue.Queue[object] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None

    def __iter__(self) -> Iterator[FrameBatch]:
        self._proc, self._stderr = start(self._args, name="frame-reader-stderr", stdout=True)
        self._thread = threading.Thread(target=self._pump, name="frame-reader", daemon=True)
        self._thread.start()
        while True:
            try:
                item = self._queue.get(timeout=self._stall)
            except queue.Empty:
                raise self._stalled() from None
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, np.ndarray)
            yield item

    def _pump(self) -> None:
        proc = self._proc
        assert proc is not None and proc.stdout is not None and proc.stderr is not None
        frame_bytes = int(np.prod(self._raw_shape))
        read = 0
        try:
            while read < self._frames and not self._stop.is_set():
                count = min(self._batch, self._frames - read)
                raw = np.empty((count, *self._raw_shape), np.uint8)
                whole = _read_into(proc.stdout, raw.data.cast("B")) // frame_bytes
                if whole:
                    self._put(_to_bgr(raw[:whole]) if self._convert else raw[:whole])
                    read += whole
                if whole < count:
                    break
            proc.stdout.close()
            code = proc.wait()
            stderr = self._stderr.text() if self._stderr is not None else ""
            if self._stop.is_set():
                return
            if read < self._required or (code != 0 and read < self._frames):
                raise FfmpegError(
                    f"decoding ended after {read} of {self._required or self._frames} frames (exit {code})",
                    stderr=stderr,
                    code="media_truncated" if code == 0 else "ffmpeg_failed",
                )
            self._put(_DONE)
        except BaseException as exc:  # handed to the consumer, who raises it
            self._put(exc)

    def _stalled(self) -> FfmpegError:
        """Kill the decoder that has given no frame for ``stall_seconds``; the error to raise."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        stderr = self._stderr.text(timeout=2) if self._stderr is not None else ""
        return FfmpegError(
            f"the decoder gave no frame for {self._stall:.0f}s; the chunk was stopped", stderr=stderr,
            code="chunk_stalled",
        )  # fmt: skip

    def _put(self, item: object) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        self._stop.set()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self._queue.put_nowait(_DONE)  # wakes a consumer thread still waiting for a batch
        except queue.Full:
            pass
        if self._proc is not None:
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> FrameReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class FrameWriter:
    """Encode batches of BGR frames into ``output``; writes happen on a thread, ``depth`` batches behind.

    With ``planes`` (even sizes only) the batches are 4:2:0 planes ``[N, H*3/2, W]``, written as they are. With
    ``alpha`` they are BGRA ``[N, H, W, 4]`` (a matte beside the colour: ``background_remover.transparent``), and
    travel as ``yuva420p`` (``bgra`` at odd sizes) to an encoder that keeps the alpha.
    """

    def __init__(
        self,
        output: Path,
        *,
        width: int,
        height: int,
        fps: str,
        options: EncoderOptions,
        depth: int = 2,
        stall_seconds: float | None = None,
        planes: bool = False,
        alpha: bool = False,
    ) -> None:
        self._format = pipe_format(width, height, alpha=alpha)
        if planes and self._format != "yuv420p":
            raise ValueError(f"{width}x{height} frames cannot travel as 4:2:0 planes (with alpha: {alpha})")
        self._convert = self._format in ("yuv420p", "yuva420p") and not planes
        self._stall = stall_seconds
        self._proc, self._stderr = start(
            encode_args(output, width, height, fps, options, self._format, alpha=alpha),
            name="frame-writer-stderr",
            stdin=True,
        )
        self._queue: queue.Queue[FrameBatch | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._shape: tuple[int, ...] = (height * 3 // 2, width) if planes else (height, width, 4 if alpha else 3)
        self.frames_written = 0
        self._thread = threading.Thread(target=self._drain, name="frame-writer", daemon=True)
        self._thread.start()

    def write(self, batch: FrameBatch) -> None:
        if batch.shape[1:] != self._shape or batch.dtype != np.uint8:
            raise ValueError(f"frames of shape {batch.shape[1:]} {batch.dtype}, expected {self._shape} uint8")
        if isinstance(self._error, BrokenPipeError):
            raise self._failure() from self._error
        if self._error is not None:
            raise self._error
        try:
            self._queue.put(batch, timeout=self._stall)
        except queue.Full:
            self._proc.kill()
            raise FfmpegError(
                f"the encoder took no frame for {self._stall:.0f}s; the chunk was stopped",
                stderr=self._stderr.text(timeout=2),
                code="chunk_stalled",
            ) from None

    def _failure(self) -> FfmpegError:
        """Why the pipe broke: the encoder exited, and its exit code and stderr say why (a broken pipe does not)."""
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # it closed its input but hangs: it is failing either way
            self._proc.kill()
            code = self._proc.wait()
        return FfmpegError(f"encoding failed (exit {code})", stderr=self._stderr.text())

    def _drain(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            while (batch := self._queue.get()) is not None:
                if self._error is None:
                    raw = self._converted(batch) if self._convert else np.ascontiguousarray(batch)
                    stdin.write(raw.data.cast("B"))
                    self.frames_written += len(batch)
        except BaseException as exc:
            self._error = exc
            while self._queue.get() is not None:  # keep the producer from blocking forever
                pass

    def _converted(self, batch: FrameBatch) -> FrameBatch:
        return _to_yuva420p(batch) if self._format == "yuva420p" else _to_yuv420p(batch)

    def close(self) -> None:
        """Flush, wait for ffmpeg, and raise if it failed.

        Raises:
            FfmpegError: the encoder exited non-zero or the pipe broke.
        """
        self._queue.put(None)
        self._thread.join()
        assert self._proc.stdin is not None and self._proc.stderr is not None
        try:
            self._proc.stdin.close()
        except BrokenPipeError:
            pass
        code = self._proc.wait()
        stderr = self._stderr.text()
        self._proc.stderr.close()
        if code != 0 or self._error is not None:
            raise FfmpegError(f"encoding failed (exit {code})", stderr=stderr)

    def abort(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._queue.put(None)
        self._thread.join(timeout=5)
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass
