"""The host back-end: the frames as numpy arrays, the pixel work in OpenCV.

What the device path taught, kept: frames may come as the decoder's 4:2:0 planes, and an operation on a region
converts only that region's whole 2×2 chroma blocks to BGR and back — a face's pixels, not the frame's. Where the
batch has its BGR view (the detector asked for it, or the frames came as BGR) a region is read from and written to
the BGR frames, and the planes follow in the region's blocks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np
import numpy.typing as npt

from workers.faces.alignment import paste_back, paste_region, warp_faces
from workers.frames.backend import Box, Draw, blur_shrink, even_box
from workers.frames.batch import Frames

if TYPE_CHECKING:
    from workers.upscaling import FrameEnhancer

__all__ = ["HostBackend", "cut_planes", "hidden_region", "paste_planes", "soft_mask"]

Array = npt.NDArray[np.uint8]
HostFrames = Frames[Array]


def cut_planes(frame: Array, box: Box) -> Array:
    """The 4:2:0 planes of the even-aligned ``box`` of one frame's planes ``[H*3/2, W]``, as a small frame of its
    own ``[h*3/2, w]`` (a copy)."""
    x1, y1, x2, y2 = box
    height, width = frame.shape[0] * 2 // 3, frame.shape[1]
    chroma = frame[height:].reshape(2, height // 2, width // 2)[:, y1 // 2 : y2 // 2, x1 // 2 : x2 // 2]
    return np.concatenate([frame[y1:y2, x1:x2], chroma.reshape((y2 - y1) // 2, x2 - x1)])


def paste_planes(frame: Array, small: Array, box: Box) -> None:
    """Write ``small`` (planes of the even-aligned ``box``, as :func:`cut_planes` gives them) into ``frame``'s
    planes, in place."""
    x1, y1, x2, y2 = box
    height, width = frame.shape[0] * 2 // 3, frame.shape[1]
    rows = y2 - y1
    frame[y1:y2, x1:x2] = small[:rows]
    chroma = frame[height:].reshape(2, height // 2, width // 2)
    chroma[:, y1 // 2 : y2 // 2, x1 // 2 : x2 // 2] = small[rows:].reshape(2, rows // 2, (x2 - x1) // 2)


def soft_mask(height: int, width: int, inner: Box) -> npt.NDArray[np.float32]:
    """1 inside ``inner`` (x1, y1, x2, y2 within the region), falling linearly to 0 at the region's edge."""
    ys = np.arange(height, dtype=np.float32)[:, None]
    xs = np.arange(width, dtype=np.float32)[None, :]
    x1, y1, x2, y2 = inner

    def ramp(pos: npt.NDArray[np.float32], lo: int, hi: int, extent: int) -> npt.NDArray[np.float32]:
        before = np.clip((pos + 1) / max(lo, 1), 0, 1) if lo > 0 else np.ones_like(pos)
        after = np.clip((extent - pos) / max(extent - hi, 1), 0, 1) if hi < extent else np.ones_like(pos)
        return np.asarray(np.minimum(before, after), np.float32)

    return np.asarray(ramp(ys, y1, y2, height) * ramp(xs, x1, x2, width), np.float32)


def hidden_region(region: Array, hidden: Array, inner: Box | None) -> Array:
    """``hidden`` where ``inner`` is (all of it with ``inner`` ``None``), fading to ``region`` at the edge."""
    if inner is None:
        return hidden
    alpha = soft_mask(region.shape[0], region.shape[1], inner)[..., None]
    return np.clip(hidden * alpha + region.astype(np.float32) * (1 - alpha) + 0.5, 0, 255).astype(np.uint8)


def _to_i420(patch: Array) -> Array:
    return np.asarray(cv2.cvtColor(patch, cv2.COLOR_BGR2YUV_I420), np.uint8)


class HostBackend:
    """numpy arrays on the host, OpenCV's kernels (:class:`~workers.frames.backend.FrameBackend`)."""

    name = "host"
    device = "cpu"
    shares_host = True

    def upload(self, array: Array) -> Array:
        return array

    def download(self, array: Array) -> Array:
        return array

    def join(self, parts: Sequence[Array]) -> Array:
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def converting(self) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()

    def handed(self, array: Array) -> Array:
        return array

    def frames(self, *, planes: Array | None = None, bgr: Array | None = None) -> HostFrames:
        if bgr is not None:
            return Frames(planes, bgr, int(bgr.shape[1]), int(bgr.shape[2]))
        if planes is None:
            raise ValueError("a batch needs its planes or its BGR frames")
        return Frames(planes, None, int(planes.shape[1]) * 2 // 3, int(planes.shape[2]))

    def to_bgr(self, planes: Array) -> Array:
        out = np.empty((len(planes), planes.shape[1] * 2 // 3, planes.shape[2], 3), np.uint8)
        for index, frame in enumerate(planes):
            cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420, dst=out[index])
        return out

    def to_planes(self, bgr: Array) -> Array:
        out = np.empty((len(bgr), bgr.shape[1] * 3 // 2, bgr.shape[2]), np.uint8)
        for index, frame in enumerate(bgr):
            cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_BGR2YUV_I420, dst=out[index])
        return out

    def ensure_bgr(self, frames: HostFrames) -> Array:
        if frames.bgr is None:
            assert frames.planes is not None
            frames.bgr = self.to_bgr(frames.planes)
        return frames.bgr

    def replace(self, frames: HostFrames, bgr: Array) -> HostFrames:
        planes = self.to_planes(bgr) if frames.planes is not None else None
        return Frames(planes, bgr, int(bgr.shape[1]), int(bgr.shape[2]))

    def _edit(self, frames: HostFrames, index: int, box: Box, change: Callable[[Array], Array]) -> None:
        """``box`` of frame ``index`` replaced by ``change(region)`` (a copy of its BGR), in both views."""
        x1, y1, x2, y2 = box
        if x2 <= x1 or y2 <= y1:
            return
        frames.written.append((index, box))
        if frames.bgr is not None:
            frame = frames.bgr[index]
            frame[y1:y2, x1:x2] = change(np.ascontiguousarray(frame[y1:y2, x1:x2]))
            if frames.planes is not None:
                even = even_box(box, frames.height, frames.width)
                ex1, ey1, ex2, ey2 = even
                patch = np.ascontiguousarray(frame[ey1:ey2, ex1:ex2])
                paste_planes(frames.planes[index], _to_i420(patch), even)
            return
        assert frames.planes is not None
        even = even_box(box, frames.height, frames.width)
        ex1, ey1 = even[0], even[1]
        patch = np.asarray(cv2.cvtColor(cut_planes(frames.planes[index], even), cv2.COLOR_YUV2BGR_I420), np.uint8)
        inner = (slice(y1 - ey1, y2 - ey1), slice(x1 - ex1, x2 - ex1))
        patch[inner] = change(np.ascontiguousarray(patch[inner]))
        paste_planes(frames.planes[index], _to_i420(patch), even)

    def blur(self, frames: HostFrames, index: int, box: Box, side: int, inner: Box | None = None) -> None:
        # cv2.GaussianBlur's kernel and border, through sepFilter2D: within a level or two of GaussianBlur's
        # fixed-point result, and 3-6x faster for a face's long kernel (benchmarks/frame_backends.py); a kernel of
        # sigma 8 px or more runs on the region shrunk (blur_shrink: 42-54 dB from GaussianBlur run whole)
        shrink, length, sigma = blur_shrink(side)
        kernel = cv2.getGaussianKernel(length, sigma)

        def change(region: Array) -> Array:
            height, width = region.shape[:2]
            small = region
            if shrink > 1:
                size = (-(-width // shrink), -(-height // shrink))
                small = np.asarray(cv2.resize(region, size, interpolation=cv2.INTER_AREA), np.uint8)
            blurred = np.asarray(
                cv2.sepFilter2D(small, -1, kernel, kernel, borderType=cv2.BORDER_REFLECT_101), np.uint8
            )
            if shrink > 1:
                blurred = np.asarray(cv2.resize(blurred, (width, height), interpolation=cv2.INTER_LINEAR), np.uint8)
            return hidden_region(region, blurred, inner)

        self._edit(frames, index, box, change)

    def pixelate(self, frames: HostFrames, index: int, box: Box, block: int, inner: Box | None = None) -> None:
        def change(region: Array) -> Array:
            height, width = region.shape[:2]
            small = cv2.resize(region, (max(1, width // block), max(1, height // block)), interpolation=cv2.INTER_AREA)
            hidden = np.asarray(cv2.resize(small, (width, height), interpolation=cv2.INTER_NEAREST), np.uint8)
            return hidden_region(region, hidden, inner)

        self._edit(frames, index, box, change)

    def fill(self, frames: HostFrames, index: int, box: Box, inner: Box | None = None) -> None:
        def change(region: Array) -> Array:
            mean = region.reshape(-1, 3).mean(axis=0).astype(np.uint8)
            return hidden_region(region, np.broadcast_to(mean, region.shape).copy(), inner)

        self._edit(frames, index, box, change)

    def draw(self, frames: HostFrames, index: int, box: Box, draw: Draw) -> None:
        def change(region: Array) -> Array:
            draw(region)
            return region

        self._edit(frames, index, box, change)

    def crops(
        self, frames: HostFrames, transforms: npt.NDArray[np.float64], frame_of: npt.NDArray[np.int64], size: int
    ) -> Array:
        bgr = self.ensure_bgr(frames)
        out = np.empty((len(transforms), size, size, 3), np.uint8)
        for face, (transform, index) in enumerate(zip(transforms, frame_of.tolist(), strict=True)):
            out[face] = warp_faces(bgr[index], [transform], size)[0]
        return out

    def paste(
        self,
        frames: HostFrames,
        crops: Array,
        transforms: npt.NDArray[np.float64],
        frame_of: npt.NDArray[np.int64],
        masks: npt.NDArray[np.float32],
    ) -> None:
        bgr = self.ensure_bgr(frames)
        size = crops.shape[1]
        for face, (transform, index) in enumerate(zip(transforms, frame_of.tolist(), strict=True)):
            mask = masks[face] if masks.ndim == 3 else masks
            paste_back(bgr[index], crops[face], transform, mask, out=bgr[index])
            box = paste_region(bgr.shape[1:], size, transform)
            if frames.planes is not None:
                self._edit(frames, index, box, lambda region: region)  # the pasted pixels into the planes
            elif box[2] > box[0] and box[3] > box[1]:
                frames.written.append((index, box))

    def upscale(self, frames: HostFrames, enhancer: FrameEnhancer, percent: int) -> HostFrames:
        from workers.upscaling import blend

        bgr = self.ensure_bgr(frames)
        return self.replace(frames, blend(bgr, enhancer.upscale(bgr), percent))
