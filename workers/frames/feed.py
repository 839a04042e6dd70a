"""A chunk's frames as 4:2:0 planes on a frame back-end: the decoder's planes go to the back-end once, are
converted to BGR there, and the BGR comes down once for the host stages (tracking, landmarks, embeddings, the
models); the back-end's planes and BGR stay there for the pixel stages (and the detector, on a torch device), and
the planes come back once for the encoder with only the regions the processors rewrote converted again.

:class:`FrameFeed` sits between the frame reader and the render pipeline: it converts each batch of planes to BGR
(the frames the host stages see) and keeps the batch's back-end arrays until the pipeline's first stage takes them
for the same frames (:meth:`FrameFeed.take`), handing them out as they are: no second upload, no second
conversion. On the host back-end the host's BGR is the batch's own (OpenCV's conversion, no copy at all). The
pipeline hands frames on in the order and number they came (:func:`workers.pipeline.run_stages`,
:class:`workers.faces.track_feed.TrackFeed`), so the n-th frame taken is the n-th frame fed.

On CUDA (and ROCm) the torch back-end copies through page-locked (pinned) host memory, and the feed uploads,
converts and downloads on a stream of its own (:meth:`~workers.frames.backend.FrameBackend.converting`), so that
its wait does not wait for the other stages' kernels and the next batch is converted while they run; a batch is
handed on only once its download has landed, and each array handed out is marked as used by the stream that takes
it (:meth:`~workers.frames.backend.FrameBackend.handed`).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from workers.frames.backend import FrameBackend
from workers.frames.batch import Frames

__all__ = ["FeedCounts", "FrameFeed"]

logger = logging.getLogger(__name__)

A = TypeVar("A")
HostBatch = npt.NDArray[np.uint8]


@dataclass
class FeedCounts:
    """What a feed moved, in frames: each frame read is uploaded once (0 on the host back-end), converted once,
    and its BGR downloaded once (0 on the host back-end)."""

    uploaded: int = 0
    converted: int = 0
    downloaded: int = 0


@dataclass
class _Held(Generic[A]):
    host: HostBatch  # the BGR batch handed to the host stages
    planes: A  # on the back-end
    bgr: A | None  # on the back-end; None where the host's batch is it (the host back-end)
    kept: int = 0  # its first frames that wait for take(); the rest are context only


class FrameFeed(Generic[A]):
    """Converts the reader's batches of planes to BGR for the host stages and keeps the batches' arrays on
    ``backend`` for :meth:`take`."""

    def __init__(self, backend: FrameBackend[A]) -> None:
        self.backend = backend
        self.counts = FeedCounts()
        self._waiting: deque[_Held[A]] = deque()  # kept batches, the first partly taken
        self._held: dict[int, _Held[A]] = {}  # every batch held (kept, or the look-behind's current), by id(host)
        self._taken = 0  # frames of the first waiting batch taken already
        self._lock = threading.Lock()

    def frames(
        self, batches: Iterable[HostBatch], *, keep: bool = True, taken: int | None = None
    ) -> Iterator[HostBatch]:
        """``batches`` of planes as BGR batches ``[N, H, W, 3]``; with ``keep`` the first ``taken`` frames' arrays
        (all of them with ``taken`` ``None``) wait for :meth:`take`. Frames that are context only, never taken — a
        look-behind (``keep`` off), the look-ahead after the ``taken`` frames — are held only until the next batch
        is read (:meth:`on_device` finds them meanwhile), so that a chunk's look-ahead does not stay on the device
        until the chunk ends."""
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
        """Frames whose arrays the feed holds now (waiting for :meth:`take`, or context being read)."""
        with self._lock:
            return sum(len(held.host) for held in self._held.values())

    def _convert(self, planes: HostBatch) -> _Held[A]:
        count = len(planes)
        self.counts.converted += count
        backend = self.backend
        if backend.shares_host:  # the host's arrays: OpenCV's conversion, nothing to move
            host = np.ascontiguousarray(planes)
            return _Held(backend.download(backend.to_bgr(host)), host, None)  # type: ignore[arg-type]
        with backend.converting():
            raw = backend.upload(planes)
            bgr = backend.to_bgr(raw)
            host = backend.download(bgr)  # waited for: the upload and the conversion before it are done too
        self.counts.uploaded += count
        self.counts.downloaded += count
        if backend.device == "cpu":
            host = host.copy()  # the CPU standing in for a device: the host's frames are not the device's
        return _Held(host, raw, bgr)

    def on_device(self, batch: HostBatch) -> A | None:
        """``batch`` — one this feed yielded and still holds — as BGR ``[N, H, W, 3]`` on the back-end, or ``None``
        where the host's frames are the back-end's (or the batch is not held)."""
        with self._lock:
            held = self._held.get(id(batch))
        if held is None or held.host is not batch or held.bgr is None:
            return None
        return self.backend.handed(held.bgr)

    def take(self, host: HostBatch) -> Frames[A]:
        """The next ``len(host)`` frames' planes and BGR on the back-end as :meth:`frames` left them (views of its
        batches; joined where the frames span two); on the host back-end the BGR is ``host`` itself: their BGR
        frames as the host stages left them."""
        planes, bgr, needed = [], [], len(host)
        backend = self.backend
        with self._lock:
            while needed:
                if not self._waiting:
                    raise RuntimeError("the frame feed lost track of its frames' planes")
                held = self._waiting[0]
                stop = min(held.kept, self._taken + needed)
                planes.append(backend.handed(held.planes[self._taken : stop]))  # type: ignore[index]
                if held.bgr is not None:
                    bgr.append(backend.handed(held.bgr[self._taken : stop]))  # type: ignore[index]
                needed -= stop - self._taken
                self._taken = stop
                if self._taken == held.kept:  # the batch's look-ahead frames, if any, are context only
                    self._waiting.popleft()
                    self._held.pop(id(held.host), None)
                    self._taken = 0
        joined = backend.join(planes)
        return backend.frames(planes=joined, bgr=backend.join(bgr) if bgr else host)  # type: ignore[arg-type]

    def report(self) -> None:
        """Log what the feed moved (once, at the end of a chunk)."""
        counts = self.counts
        logger.info(
            "frame feed on the %s back-end on %s: %d frames converted, %d uploaded, %d downloaded",
            self.backend.name, self.backend.device, counts.converted, counts.uploaded, counts.downloaded,
        )  # fmt: skip
