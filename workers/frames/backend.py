"""The frame back-end interface: what a processor's pixel work may ask of the frames' arrays.

Every operation works in place on a :class:`~workers.frames.batch.Frames` batch, keeps its planes and its BGR
view in step and lists the regions it rewrote (:attr:`~workers.frames.batch.Frames.written`); a region operation
converts (and writes back) only the region's whole 2×2 chroma blocks, so its cost grows with the faces' area, not
the frame's. Arrays handed in and out (crops, masks, transforms) are the host's
numpy arrays unless said otherwise: the models run on them.

Where the two back-ends must agree, they agree to a PSNR bound, not to the bit
(``tests/workers/frames/test_backend_contract.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from workers.frames.batch import Frames

if TYPE_CHECKING:
    from workers.upscaling import FrameEnhancer

__all__ = ["BLUR_SHRINK_SIGMA", "Box", "Draw", "FrameBackend", "blur_shrink", "even_box"]

A = TypeVar("A")

Box = tuple[int, int, int, int]
"""``x1, y1, x2, y2`` in whole pixels, clipped to the frame (may be empty)."""

Draw = Callable[[npt.NDArray[np.uint8]], None]
"""Draws into a BGR region ``uint8 [h, w, 3]`` on the host, in place."""


BLUR_SHRINK_SIGMA = 4.0
"""A longer blur runs on its region shrunk by whole factors while its sigma stays at least this many pixels there:
a whole 1080p frame blurred at the default strength (a 961-px kernel) took 2.1–3.2 s on the host, run whole
(docs/performance.md)."""


def blur_shrink(side: int) -> tuple[int, int, float]:
    """How :meth:`FrameBackend.blur` runs an odd ``side`` kernel: ``(shrink, length, sigma)``, the factor the region
    is area-averaged down by (1: not at all) and the odd kernel run there, of that sigma; the result is enlarged
    back bilinearly. Unshrunk, the kernel is ``side`` with ``cv2.GaussianBlur``'s sigma for it; shrunk, the same
    sigma in the smaller region's pixels, cut at 3 sigmas. Against ``cv2.GaussianBlur`` run whole, on a photo:
    54 dB at a 61-px kernel, 53 at 101, 47 at 201 and 42 at 961 (a whole 1280-px picture)."""
    sigma = 0.3 * ((side - 1) * 0.5 - 1) + 0.8  # cv2.GaussianBlur's, for sigma 0
    shrink = max(1, int(sigma // BLUR_SHRINK_SIGMA))
    if shrink == 1:
        return 1, side, sigma
    small = sigma / shrink
    return shrink, 2 * math.ceil(3 * small) + 1, small


def even_box(box: Box, height: int, width: int) -> Box:
    """``box`` widened to whole 2×2 chroma blocks: the unit a 4:2:0 region converts in."""
    x1, y1, x2, y2 = box
    return x1 & ~1, y1 & ~1, min(width, (x2 + 1) & ~1), min(height, (y2 + 1) & ~1)


class FrameBackend(Protocol[A]):
    """The pixel operations of the processors, on one kind of array.

    Attributes:
        name: ``host`` or ``torch``, as the job's events and ``swapfarm doctor`` say it.
        device: where the arrays live (``cpu``, ``cuda`` …).
        shares_host: whether its arrays are the host's own memory (numpy's): a region written shows in the host's
            frames with no copy.
    """

    name: str
    device: str
    shares_host: bool

    def upload(self, array: npt.NDArray[np.uint8]) -> A:
        """A host array in the back-end's memory (pinned and queued on CUDA)."""
        ...

    def download(self, array: A) -> npt.NDArray[np.uint8]:
        """A back-end array on the host (waited for: the host reads it next)."""
        ...

    def join(self, parts: Sequence[A]) -> A:
        """Arrays joined along their first (frame) axis; one part as it is."""
        ...

    def converting(self) -> AbstractContextManager[object]:
        """Where a feed uploads, converts and downloads (a stream of its own on CUDA, so that its wait does not wait
        for the other stages' work)."""
        ...

    def handed(self, array: A) -> A:
        """``array``, used from now on by the calling thread's work (on CUDA: its memory is not reused before that
        thread's stream is done with it)."""
        ...

    def frames(self, *, planes: A | None = None, bgr: A | None = None) -> Frames[A]:
        """A batch of the back-end's planes ``[N, H*3/2, W]`` and/or BGR frames ``[N, H, W, 3]``."""
        ...

    def to_bgr(self, planes: A) -> A:
        """Whole frames' 4:2:0 planes as BGR (BT.601, limited range, as OpenCV's ``COLOR_YUV2BGR_I420``)."""
        ...

    def to_planes(self, bgr: A) -> A:
        """Whole BGR frames (even sizes) as 4:2:0 planes (as OpenCV's ``COLOR_BGR2YUV_I420``)."""
        ...

    def ensure_bgr(self, frames: Frames[A]) -> A:
        """The batch's BGR view, converted from its planes the first time it is asked for."""
        ...

    def replace(self, frames: Frames[A], bgr: A) -> Frames[A]:
        """A batch of new whole BGR frames (e.g. larger: the frame enhancer's) in the form of ``frames``: with
        planes where it had planes."""
        ...

    def blur(self, frames: Frames[A], index: int, box: Box, side: int, inner: Box | None = None) -> None:
        """Frame ``index``'s ``box`` Gaussian-blurred by an odd ``side`` kernel (sigma from the side, as
        ``cv2.GaussianBlur`` derives it; the region's own pixels reflected at its edge; a long kernel run on the
        region shrunk, :func:`blur_shrink`). ``inner``: a box within
        ``box`` (region coordinates) that is hidden fully, the rest fading linearly to the original at the
        region's edge."""
        ...

    def pixelate(self, frames: Frames[A], index: int, box: Box, block: int, inner: Box | None = None) -> None:
        """Frame ``index``'s ``box`` in blocks of about ``block`` pixels (area-averaged, nearest back up)."""
        ...

    def fill(self, frames: Frames[A], index: int, box: Box, inner: Box | None = None) -> None:
        """Frame ``index``'s ``box`` filled with its mean colour."""
        ...

    def draw(self, frames: Frames[A], index: int, box: Box, draw: Draw) -> None:
        """``draw`` on frame ``index``'s ``box`` (on the host: marks are few, their pixels fewer)."""
        ...

    def crops(
        self, frames: Frames[A], transforms: npt.NDArray[np.float64], frame_of: npt.NDArray[np.int64], size: int
    ) -> npt.NDArray[np.uint8]:
        """One aligned ``size`` crop per frame → crop ``transforms`` ``[F, 2, 3]`` of frame ``frame_of`` (bilinear,
        the edge replicated): uint8 ``[F, size, size, 3]`` BGR on the host."""
        ...

    def paste(
        self,
        frames: Frames[A],
        crops: npt.NDArray[np.uint8],
        transforms: npt.NDArray[np.float64],
        frame_of: npt.NDArray[np.int64],
        masks: npt.NDArray[np.float32],
    ) -> None:
        """Each crop ``[F, S, S, 3]`` warped back through the inverse of its transform (bicubic) and blended into
        its frame by its mask (``[S, S]`` for all, or ``[F, S, S]``), in place."""
        ...

    def upscale(self, frames: Frames[A], enhancer: FrameEnhancer, percent: int) -> Frames[A]:
        """The whole frames upscaled by ``enhancer`` (its overlapping tiles, the frame's edge repeated, the tiles'
        cores joined) and blended ``percent`` over the frames resized bilinearly to the same size, as a batch of
        the larger frames (:meth:`replace`)."""
        ...
