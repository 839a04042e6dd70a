"""A chunk's frames on the device path: the decoder's 4:2:0 planes go to the device once, are converted to BGR
there, and the BGR comes down once for the host stages (tracking, landmarks, embeddings); the device's planes and
BGR stay there for the pixel stages (and the detector, on the device), and the planes come back once for the
encoder with only the faces' regions rewritten.

:class:`PlaneFeed` sits between the frame reader and the render pipeline: it converts each batch of planes to BGR
(the frames the host stages see) and keeps the batch's device tensors until the pipeline's first stage takes them
for the same frames (:meth:`PlaneFeed.take`), handing them out as they are: no second upload, no second
conversion. On a GPU the conversion runs there; on the CPU, where the host is the device, OpenCV's conversion
gives the same values to the bit, faster, and the host's frames are the device's (no copy at all). The pipeline
hands frames on in the order and number they came (:func:`workers.pipeline.run_stages`,
:class:`workers.track_feed.TrackFeed`), so the n-th frame taken is the n-th frame fed.

On CUDA (and ROCm) the copies go through page-locked (pinned) host memory: an upload is staged in a pinned buffer
and queued without blocking; a download is queued into a pinned buffer and waited for (an event on the stream)
before the host reads it. The feed uploads, converts and downloads on a stream of its own, so that its wait does
not wait for the other stages' kernels (the model's, the pastes') and the next batch is converted while they run;
a batch is handed on only once its download has landed, so its device tensors are complete by the time another
stream reads them, and each tensor handed out is recorded on the stream that takes it (``record_stream``), so that
its memory is not reused by the feed before that stream is done with it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch

from workers.device.colour import bgr_to_yuv420, even_region, paste_planes, yuv420_to_bgr_hwc
from workers.processors.base import FrameBatch

__all__ = ["DeviceFrames", "FeedCounts", "PlaneFeed", "to_device", "to_host"]

logger = logging.getLogger(__name__)


def _pinned(device: torch.device) -> bool:
    """Whether copies to and from ``device`` go through pinned host memory (CUDA and ROCm, where torch has it)."""
    return device.type == "cuda" and torch.cuda.is_available()


def to_device(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """``array`` on ``device``: on CUDA staged in a pinned buffer and copied without blocking (later work on the
    current stream sees it; torch's pinned-memory cache keeps the buffer until the copy is done); elsewhere a copy
    (the CPU as a device of its own)."""
    source = torch.from_numpy(np.ascontiguousarray(array))
    if not _pinned(device):
        return source.to(device, copy=True)
    staging = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
    staging.copy_(source)
    return staging.to(device, non_blocking=True)


def to_host(tensor: torch.Tensor) -> np.ndarray:
    """``tensor`` on the host: from CUDA into a pinned buffer, waited for before it is handed out; a tensor on the
    CPU as it is (no copy)."""
    if not _pinned(tensor.device):
        return tensor.cpu().numpy()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    host.copy_(tensor, non_blocking=True)
    cuda: Any = torch.cuda  # its Event and Stream constructors are untyped
    done = cuda.Event()
    done.record(torch.cuda.current_stream(tensor.device))
    done.synchronize()  # the host reads it next: the copy must have landed
    return host.numpy()


class DeviceFrames:
    """One batch on the device: its 4:2:0 planes (``uint8 [N, H*3/2, W]``, what goes back to the encoder) and its
    BGR frames (``uint8 [N, 3, H, W]``, what the crops are cut from and pasted into).

    With ``bgr`` ``None`` the device is the host (the CPU): the BGR frames are a view of the host's BGR batch (no
    copy: a paste shows in both). Otherwise ``bgr`` is the batch's BGR on the device, converted there from the
    planes, and :meth:`store` copies a rewritten region back to the host's batch, so that the host stages of a
    later processor see it.
    """

    def __init__(self, planes: torch.Tensor, host: FrameBatch, bgr: torch.Tensor | None = None) -> None:
        self.planes = planes
        self.host = host
        self.shared = bgr is None
        self.height, self.width = host.shape[1], host.shape[2]
        self._bgr = bgr

    @property
    def bgr(self) -> torch.Tensor:
        """The batch as BGR ``uint8 [N, 3, H, W]`` on the device."""
        if self._bgr is None:
            self._bgr = torch.from_numpy(self.host).permute(0, 3, 1, 2)
        return self._bgr

    def store(self, index: int, region: tuple[int, int, int, int]) -> None:
        """Frame ``index``'s ``x1, y1, x2, y2`` of :attr:`bgr`, rewritten by a stage, written back into its planes
        (widened to whole 2×2 chroma blocks), and into the host's batch where that is not the same memory."""
        x1, y1, x2, y2 = even_region(*region, self.height, self.width)
        if x2 <= x1 or y2 <= y1:
            return
        if self.shared:  # the host's memory: OpenCV's conversion, the same values to the bit and faster there
            small = cv2.cvtColor(np.ascontiguousarray(self.host[index, y1:y2, x1:x2]), cv2.COLOR_BGR2YUV_I420)
            paste_planes(self.planes[index], torch.from_numpy(small), x1, y1, x2, y2)
            return
        patch = self.bgr[index, :, y1:y2, x1:x2]
        paste_planes(self.planes[index], bgr_to_yuv420(patch[None].float())[0], x1, y1, x2, y2)
        self.host[index, y1:y2, x1:x2] = patch.permute(1, 2, 0).cpu().numpy()


@dataclass
class FeedCounts:
    """What a feed moved, in frames: each frame read is uploaded once (0 where the host is the device), converted
    once, and its BGR downloaded once."""

    uploaded: int = 0
    converted: int = 0
    downloaded: int = 0


@dataclass
class _Held:
    host: FrameBatch  # the BGR batch handed to the host stages
    planes: torch.Tensor  # on the device
    bgr: torch.Tensor | None  # on the device, [N, 3, H, W]; None where the host's batch is it (the CPU)
    kept: int = 0  # its first frames that wait for take(); the rest are context only


class PlaneFeed:
    """Converts the reader's batches of planes to BGR for the host stages and keeps the batches' device tensors
    for :meth:`take`.

    Args:
        device: the torch device the planes go to (``cpu``, ``cuda`` …).
        convert_on_device: convert in torch on ``device`` and keep the device's planes and BGR, downloading the
            BGR for the host stages (what a GPU does); off: convert with OpenCV on the host, whose planes and BGR
            are then the device's. ``None``: on unless the device is the CPU.
    """

    def __init__(self, device: str, *, convert_on_device: bool | None = None) -> None:
        self.device = torch.device(device)
        self.convert_on_device = self.device.type != "cpu" if convert_on_device is None else convert_on_device
        if not self.convert_on_device and self.device.type != "cpu":
            raise ValueError(f"frames on {self.device} are converted there (the host is not that device)")
        self.counts = FeedCounts()
        cuda: Any = torch.cuda  # its Stream constructor is untyped
        self._stream: torch.cuda.Stream | None = cuda.Stream(self.device) if _pinned(self.device) else None
        self._waiting: deque[_Held] = deque()  # kept batches, the first partly taken
        self._held: dict[int, _Held] = {}  # every batch held (kept, or the look-behind's current), by id(host)
        self._taken = 0  # frames of the first waiting batch taken already
        self._lock = threading.Lock()

    def frames(
        self, batches: Iterable[FrameBatch], *, keep: bool = True, taken: int | None = None
    ) -> Iterator[FrameBatch]:
        """``batches`` of planes as BGR batches ``[N, H, W, 3]``; with ``keep`` the first ``taken`` frames' device
        tensors (all of them with ``taken`` ``None``) wait for :meth:`take`. Frames that are context only, never
        taken — a look-behind (``keep`` off), the look-ahead after the ``taken`` frames — are held only until the
        next batch is read (:meth:`on_device` finds them meanwhile), so that a chunk's look-ahead does not stay on
        the device until the chunk ends."""
        left = math.inf if taken is None else taken
        for planes in batches:
            held = self._convert(planes)
            held.kept = int(min(len(planes), left)) if keep else 0
            left -= held.kept
            with self._lock:
                self._held[id(held.host)] = held
                if held.kept:
                    self._waiting.append(held)
            try:
                yield held.host
            finally:
                if not held.kept:
                    with self._lock:
                        self._held.pop(id(held.host), None)

    @property
    def held(self) -> int:
        """Frames whose device tensors the feed holds now (waiting for :meth:`take`, or context being read)."""
        with self._lock:
            return sum(len(held.host) for held in self._held.values())

    def _convert(self, planes: FrameBatch) -> _Held:
        count = len(planes)
        self.counts.converted += count
        if not self.convert_on_device:
            # The same values to the bit (tests/workers/test_device_pipeline.py), ~15x faster on the CPU than
            # torch's elementwise passes (benchmarks/device_pipeline.py): on the CPU the host is the device.
            host = np.empty((count, planes.shape[1] * 2 // 3, planes.shape[2], 3), np.uint8)
            for index, frame in enumerate(planes):
                cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420, dst=host[index])
            return _Held(host, torch.from_numpy(np.ascontiguousarray(planes)), None)
        with torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext():
            raw = to_device(planes, self.device)
            bgr = yuv420_to_bgr_hwc(raw)
            host = to_host(bgr)  # waited for: the upload and the conversion before it are done too
        self.counts.uploaded += count
        if self.device.type == "cpu":  # the CPU standing in for a device: the host's frames are not the device's
            host = host.copy()
        self.counts.downloaded += count
        return _Held(host, raw, bgr.permute(0, 3, 1, 2))

    def on_device(self, batch: FrameBatch) -> torch.Tensor | None:
        """``batch`` — one this feed yielded and still holds — as BGR ``uint8 [N, 3, H, W]`` on the device, or
        ``None`` where the host's frames are the device's (or the batch is not held)."""
        with self._lock:
            held = self._held.get(id(batch))
        if held is None or held.host is not batch or held.bgr is None:
            return None
        return self._handed(held.bgr)

    def take(self, host: FrameBatch) -> DeviceFrames:
        """The next ``len(host)`` frames' planes and BGR, on the device as :meth:`frames` left them (views of its
        batches; joined where the frames span two), with ``host``: their BGR frames as the host stages left them."""
        planes, bgr, needed = [], [], len(host)
        with self._lock:
            while needed:
                if not self._waiting:
                    raise RuntimeError("the device path lost track of its frames' planes")
                held = self._waiting[0]
                stop = min(held.kept, self._taken + needed)
                planes.append(self._handed(held.planes[self._taken : stop]))
                if held.bgr is not None:
                    bgr.append(self._handed(held.bgr[self._taken : stop]))
                needed -= stop - self._taken
                self._taken = stop
                if self._taken == held.kept:  # the batch's look-ahead frames, if any, are context only
                    self._waiting.popleft()
                    self._held.pop(id(held.host), None)
                    self._taken = 0
        return DeviceFrames(_joined(planes), host, _joined(bgr) if bgr else None)

    def _handed(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` (a view of a batch the feed converted), used from now on by the calling thread's stream:
        once freed, its memory is not reused until the work that stream queued by then is done (a no-op off
        CUDA)."""
        if self._stream is not None:
            tensor.record_stream(torch.cuda.current_stream(self.device))
        return tensor

    def report(self) -> None:
        """Log what the feed moved (once, at the end of a chunk)."""
        counts = self.counts
        logger.info(
            "device feed on %s: %d frames converted (%s), %d uploaded, %d downloaded",
            self.device, counts.converted, "on the device" if self.convert_on_device else "on the host",
            counts.uploaded, counts.downloaded,
        )  # fmt: skip


def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)
