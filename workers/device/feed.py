"""A chunk's frames on the device path: the decoder's 4:2:0 planes go to the device once, the host stages
(detection, tracking, landmarks, embeddings) see BGR frames converted there, and the planes come back once for the
encoder with only the faces' regions rewritten.

:class:`PlaneFeed` sits between the frame reader and the render pipeline: it converts each batch of planes to BGR
in torch (the frames the host stages see) and keeps the planes, frame by frame, until the pipeline's first stage
takes them back for the same frames. On a GPU the conversion runs there (the frames
go up once, as planes); on the CPU, where the host is the device, OpenCV's conversion gives the same values to the
bit, faster. The pipeline hands frames on in the order and number they came
(:func:`workers.pipeline.run_stages`, :class:`workers.track_feed.TrackFeed`), so the n-th frame taken is the
n-th frame fed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator

import cv2
import numpy as np
import torch

from workers.device.colour import bgr_to_yuv420, even_region, paste_planes, yuv420_to_bgr_hwc
from workers.processors.base import FrameBatch

__all__ = ["DeviceFrames", "PlaneFeed"]


class DeviceFrames:
    """One batch on the device: its 4:2:0 planes (``uint8 [N, H*3/2, W]``, what goes back to the encoder) and its
    BGR frames (``uint8 [N, 3, H, W]``, what the crops are cut from and pasted into).

    On the CPU the BGR frames are a view of the host's BGR batch (no copy: a paste shows in both); on a GPU they
    are converted from the planes there, and :meth:`store` copies a rewritten region back to the host's batch,
    so that the host stages of a later processor see it.
    """

    def __init__(self, planes: torch.Tensor, host: FrameBatch) -> None:
        self.planes = planes
        self.host = host
        self.shared = planes.device.type == "cpu"
        self.height, self.width = host.shape[1], host.shape[2]
        self._bgr: torch.Tensor | None = None

    @property
    def bgr(self) -> torch.Tensor:
        """The batch as BGR ``uint8 [N, 3, H, W]`` on the device."""
        if self._bgr is None:
            if self.shared:
                self._bgr = torch.from_numpy(self.host).permute(0, 3, 1, 2)
            else:
                self._bgr = yuv420_to_bgr_hwc(self.planes).permute(0, 3, 1, 2)
        return self._bgr

    def store(self, index: int, region: tuple[int, int, int, int]) -> None:
        """Frame ``index``'s ``x1, y1, x2, y2`` of :attr:`bgr`, rewritten by a stage, written back into its planes
        (widened to whole 2×2 chroma blocks), and into the host's batch where that is not the same memory."""
        x1, y1, x2, y2 = even_region(*region, self.height, self.width)
        if x2 <= x1 or y2 <= y1:
            return
        patch = self.bgr[index, :, y1:y2, x1:x2]
        paste_planes(self.planes[index], bgr_to_yuv420(patch[None].float())[0], x1, y1, x2, y2)
        if not self.shared:
            self.host[index, y1:y2, x1:x2] = patch.permute(1, 2, 0).cpu().numpy()


class PlaneFeed:
    """Converts the reader's batches of planes to BGR for the host stages and keeps the planes for
    :meth:`take`.

    Args:
        device: the torch device the planes go to (``cpu``, ``cuda`` …).
    """

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self._waiting: deque[np.ndarray] = deque()  # one batch of planes each, the first partly taken
        self._taken = 0  # frames of the first batch taken already
        self._lock = threading.Lock()

    def frames(self, batches: Iterable[FrameBatch], *, keep: bool = True) -> Iterator[FrameBatch]:
        """``batches`` of planes as BGR batches ``[N, H, W, 3]``, converted on the device; with ``keep`` the
        planes wait for :meth:`take` (a look-behind's frames, context only, are not kept)."""
        for planes in batches:
            if self.device.type == "cpu":
                # The same values to the bit (tests/workers/test_device_pipeline.py), ~15x faster on the CPU than
                # torch's elementwise passes (benchmarks/device_pipeline.py): on the CPU the host is the device.
                bgr = np.empty((len(planes), planes.shape[1] * 2 // 3, planes.shape[2], 3), np.uint8)
                for index, frame in enumerate(planes):
                    cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420, dst=bgr[index])
            else:
                raw = torch.from_numpy(planes).to(self.device, non_blocking=True)
                bgr = yuv420_to_bgr_hwc(raw).cpu().numpy()
            if keep:
                with self._lock:
                    self._waiting.append(planes)
            yield bgr

    def take(self, host: FrameBatch) -> DeviceFrames:
        """The next ``len(host)`` frames' planes, on the device, with ``host``: their BGR frames as the host stages
        left them."""
        parts, needed = [], len(host)
        with self._lock:
            while needed:
                if not self._waiting:
                    raise RuntimeError("the device path lost track of its frames' planes")
                batch = self._waiting[0]
                part = batch[self._taken : self._taken + needed]
                parts.append(part)
                needed -= len(part)
                self._taken += len(part)
                if self._taken == len(batch):
                    self._waiting.popleft()
                    self._taken = 0
        planes = parts[0] if len(parts) == 1 else np.concatenate(parts)
        return DeviceFrames(torch.from_numpy(np.ascontiguousarray(planes)).to(self.device), host)
