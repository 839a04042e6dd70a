"""The torch back-end: the frames as tensors on a torch device (CUDA, ROCm; the CPU in tests), the pixel work in
torch and kornia there — no branch back to OpenCV inside. Copies to and from CUDA go through page-locked (pinned)
host memory.

The frame enhancer's tiles are cut, run (a torch engine's :meth:`run_on_device`, the tensors where they are) and
joined there too (:func:`upscaled`, :func:`blended`).

It agrees with the host back-end to a PSNR bound (``tests/workers/frames/test_backend_contract.py``), not to the
bit: the colour conversions are OpenCV's fixed point (so that a detector sees the same pixels), the rest is
torch's own arithmetic (kornia's Gaussian kernel and warps, torch's area and nearest resampling).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from kornia.filters import get_gaussian_kernel1d
from kornia.geometry.transform import warp_affine

from workers.frames.backend import Box, Draw, blur_shrink, even_box
from workers.frames.batch import Frames

if TYPE_CHECKING:
    from workers.upscaling import FrameEnhancer

__all__ = ["TorchBackend", "bgr_to_yuv420", "blended", "upscaled", "yuv420_to_bgr"]

TorchFrames = Frames[torch.Tensor]

# OpenCV's fixed-point BT.601 limited-range coefficients (ITUR_BT_601_*, scaled by 2**20)
_SHIFT = 20
_CY, _CUB, _CUG, _CVG, _CVR = 1220542, 2116026, -409993, -852492, 1673527
_RY, _GY, _BY = 269484, 528482, 102760
_RU, _GU, _BU = -155188, -305135, 460324  # V's red coefficient is U's blue one (0.439)
_GV, _BV = -385875, -74448
_MARGIN = 2  # pixels around a crop's region, so that bilinear taps read real pixels


def yuv420_to_bgr(raw: torch.Tensor) -> torch.Tensor:
    """uint8 4:2:0 planes ``[N, H*3/2, W]`` as uint8 BGR ``[N, H, W, 3]``, in OpenCV's fixed point."""
    count, rows, width = raw.shape
    height = rows * 2 // 3
    y = raw[:, :height].to(torch.int32).sub_(16).clamp_min_(0).mul_(_CY)
    blocks = y.view(count, height // 2, 2, width // 2, 2)  # each 2×2 block shares its chroma: broadcast
    chroma = raw[:, height:].reshape(count, 2, height // 2, width // 2).to(torch.int32).sub_(128)
    u, v = chroma[:, 0], chroma[:, 1]
    half = 1 << (_SHIFT - 1)
    out = torch.empty(count, height // 2, 2, width // 2, 2, 3, dtype=torch.uint8, device=raw.device)
    for channel, term in enumerate((u * _CUB + half, u * _CUG + v * _CVG + half, v * _CVR + half)):
        out[..., channel] = (blocks + term[:, :, None, :, None]).bitwise_right_shift_(_SHIFT).clamp_(0, 255)
    return out.view(count, height, width, 3)


def bgr_to_yuv420(frames: torch.Tensor) -> torch.Tensor:
    """BGR ``[N, H, W, 3]`` (uint8, or float holding whole numbers; even sizes) as uint8 4:2:0 planes
    ``[N, H*3/2, W]``, in OpenCV's fixed point (each 2×2 block's chroma from its top-left pixel)."""
    count, height, width, _ = frames.shape
    b, g, r = frames.to(torch.int32).unbind(3)
    half = 1 << (_SHIFT - 1)
    y = (r * _RY + g * _GY + b * _BY + (half + (16 << _SHIFT))).bitwise_right_shift_(_SHIFT)
    b, g, r = b[:, ::2, ::2], g[:, ::2, ::2], r[:, ::2, ::2]
    u = (r * _RU + g * _GU + b * _BU + (half + (128 << _SHIFT))).bitwise_right_shift_(_SHIFT)
    v = (r * _BU + g * _GV + b * _BV + (half + (128 << _SHIFT))).bitwise_right_shift_(_SHIFT)
    chroma = torch.stack([u, v], dim=1).reshape(count, height // 2, width)
    return torch.cat([y, chroma], dim=1).clamp_(0, 255).to(torch.uint8)


def _cut_planes(frame: torch.Tensor, box: Box) -> torch.Tensor:
    x1, y1, x2, y2 = box
    height, width = frame.shape[0] * 2 // 3, frame.shape[1]
    chroma = frame[height:].reshape(2, height // 2, width // 2)[:, y1 // 2 : y2 // 2, x1 // 2 : x2 // 2]
    return torch.cat([frame[y1:y2, x1:x2], chroma.reshape((y2 - y1) // 2, x2 - x1)], dim=0)


def _paste_planes(frame: torch.Tensor, small: torch.Tensor, box: Box) -> None:
    x1, y1, x2, y2 = box
    height, width = frame.shape[0] * 2 // 3, frame.shape[1]
    rows = y2 - y1
    frame[y1:y2, x1:x2] = small[:rows]
    chroma = frame[height:].view(2, height // 2, width // 2)
    chroma[:, y1 // 2 : y2 // 2, x1 // 2 : x2 // 2] = small[rows:].reshape(2, rows // 2, (x2 - x1) // 2)


def _reflected(length: int, pad: int, device: torch.device) -> torch.Tensor:
    """Indices of ``range(-pad, length + pad)`` folded into ``0…length-1`` (``gfedcb|abcdefgh|gfedcba``), for any
    ``pad``, even one longer than the side."""
    index = torch.arange(-pad, length + pad, device=device)
    if length == 1:
        return torch.zeros_like(index)
    period = 2 * (length - 1)
    index = index.remainder(period)
    return torch.where(index >= length, period - index, index)


def _soft_mask(height: int, width: int, inner: Box, device: torch.device) -> torch.Tensor:
    x1, y1, x2, y2 = inner

    def ramp(extent: int, lo: int, hi: int) -> torch.Tensor:
        pos = torch.arange(extent, dtype=torch.float32, device=device)
        ones = torch.ones_like(pos)
        before = ((pos + 1) / max(lo, 1)).clamp(0, 1) if lo > 0 else ones
        after = ((extent - pos) / max(extent - hi, 1)).clamp(0, 1) if hi < extent else ones
        return torch.minimum(before, after)

    return ramp(height, y1, y2)[:, None, None] * ramp(width, x1, x2)[None, :, None]


def _hidden(region: torch.Tensor, hidden: torch.Tensor, inner: Box | None) -> torch.Tensor:
    """``hidden`` (float ``[h, w, 3]``) where ``inner`` is, fading to ``region`` at the edge; uint8."""
    if inner is not None:
        alpha = _soft_mask(region.shape[0], region.shape[1], inner, region.device)
        hidden = hidden * alpha + region.float() * (1 - alpha)
    return hidden.round().clamp(0, 255).to(torch.uint8)


def _pinned(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_available()


class TorchBackend:
    """Tensors on ``device`` (:class:`~workers.frames.backend.FrameBackend`)."""

    name = "torch"
    shares_host = False

    def __init__(self, device: str) -> None:
        self._device = torch.device(device)
        self.device = str(self._device)
        cuda: Any = torch.cuda  # its Stream constructor is untyped
        self._stream: torch.cuda.Stream | None = cuda.Stream(self._device) if _pinned(self._device) else None

    def join(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        return parts[0] if len(parts) == 1 else torch.cat(list(parts))

    def converting(self) -> AbstractContextManager[object]:
        return torch.cuda.stream(self._stream) if self._stream is not None else contextlib.nullcontext()

    def handed(self, array: torch.Tensor) -> torch.Tensor:
        if self._stream is not None:
            array.record_stream(torch.cuda.current_stream(self._device))
        return array

    def upload(self, array: npt.NDArray[np.uint8]) -> torch.Tensor:
        source = torch.from_numpy(np.ascontiguousarray(array))
        if not _pinned(self._device):
            return source.to(self._device, copy=True)
        staging = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
        staging.copy_(source)
        return staging.to(self._device, non_blocking=True)

    def download(self, array: torch.Tensor) -> npt.NDArray[np.uint8]:
        if not _pinned(array.device):
            return np.asarray(array.detach().cpu().numpy(), np.uint8)
        host = torch.empty(array.shape, dtype=array.dtype, pin_memory=True)
        host.copy_(array, non_blocking=True)
        cuda: Any = torch.cuda  # its Event constructor is untyped
        done = cuda.Event()
        done.record(torch.cuda.current_stream(array.device))
        done.synchronize()  # the host reads it next: the copy must have landed
        return np.asarray(host.numpy(), np.uint8)

    def frames(self, *, planes: torch.Tensor | None = None, bgr: torch.Tensor | None = None) -> TorchFrames:
        if bgr is not None:
            return Frames(planes, bgr, int(bgr.shape[1]), int(bgr.shape[2]))
        if planes is None:
            raise ValueError("a batch needs its planes or its BGR frames")
        return Frames(planes, None, int(planes.shape[1]) * 2 // 3, int(planes.shape[2]))

    def to_bgr(self, planes: torch.Tensor) -> torch.Tensor:
        return yuv420_to_bgr(planes)

    def to_planes(self, bgr: torch.Tensor) -> torch.Tensor:
        return bgr_to_yuv420(bgr)

    def ensure_bgr(self, frames: TorchFrames) -> torch.Tensor:
        if frames.bgr is None:
            assert frames.planes is not None
            frames.bgr = yuv420_to_bgr(frames.planes)
        return frames.bgr

    def replace(self, frames: TorchFrames, bgr: torch.Tensor) -> TorchFrames:
        planes = bgr_to_yuv420(bgr) if frames.planes is not None else None
        return Frames(planes, bgr, int(bgr.shape[1]), int(bgr.shape[2]))

    def _edit(self, frames: TorchFrames, index: int, box: Box, change: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """``box`` of frame ``index`` replaced by ``change(region)`` (its BGR, uint8 ``[h, w, 3]``), in both
        views; only the region's whole 2×2 blocks of the planes are converted."""
        x1, y1, x2, y2 = box
        if x2 <= x1 or y2 <= y1:
            return
        frames.written.append((index, box))
        even = even_box(box, frames.height, frames.width)
        ex1, ey1, ex2, ey2 = even
        if frames.bgr is not None:
            frame = frames.bgr[index]
            frame[y1:y2, x1:x2] = change(frame[y1:y2, x1:x2].clone())
            if frames.planes is not None:
                patch = frame[ey1:ey2, ex1:ex2][None]
                _paste_planes(frames.planes[index], bgr_to_yuv420(patch)[0], even)
            return
        assert frames.planes is not None
        patch = yuv420_to_bgr(_cut_planes(frames.planes[index], even)[None])[0]
        rows, columns = slice(y1 - ey1, y2 - ey1), slice(x1 - ex1, x2 - ex1)
        patch[rows, columns] = change(patch[rows, columns].clone())
        _paste_planes(frames.planes[index], bgr_to_yuv420(patch[None])[0], even)

    def blur(self, frames: TorchFrames, index: int, box: Box, side: int, inner: Box | None = None) -> None:
        shrink, length, sigma = blur_shrink(side)

        def change(region: torch.Tensor) -> torch.Tensor:
            height, width = region.shape[:2]
            planar = region.permute(2, 0, 1).float()[None]  # [1, 3, h, w]
            if shrink > 1:
                small = (-(-height // shrink), -(-width // shrink))
                planar = F.interpolate(planar, size=small, mode="area").round()
            kernel = get_gaussian_kernel1d(length, sigma, device=region.device, dtype=torch.float32).reshape(-1)
            pad = length // 2
            rows = _reflected(planar.shape[2], pad, region.device)
            columns = _reflected(planar.shape[3], pad, region.device)
            padded = planar[:, :, rows][:, :, :, columns]  # [1, 3, h+2p, w+2p]
            weights = kernel.view(1, 1, 1, length).expand(3, 1, 1, length)
            across = F.conv2d(padded, weights, groups=3)
            down = F.conv2d(across, weights.transpose(2, 3), groups=3)
            if shrink > 1:
                down = F.interpolate(down.round(), size=(height, width), mode="bilinear", align_corners=False)
            return _hidden(region, down[0].permute(1, 2, 0), inner)

        self._edit(frames, index, box, change)

    def pixelate(self, frames: TorchFrames, index: int, box: Box, block: int, inner: Box | None = None) -> None:
        def change(region: torch.Tensor) -> torch.Tensor:
            height, width = region.shape[:2]
            planar = region.permute(2, 0, 1).float()[None]
            small = F.interpolate(planar, size=(max(1, height // block), max(1, width // block)), mode="area")
            hidden = F.interpolate(small.round(), size=(height, width), mode="nearest")
            return _hidden(region, hidden[0].permute(1, 2, 0), inner)

        self._edit(frames, index, box, change)

    def fill(self, frames: TorchFrames, index: int, box: Box, inner: Box | None = None) -> None:
        def change(region: torch.Tensor) -> torch.Tensor:
            mean = region.reshape(-1, 3).float().mean(dim=0).floor()
            return _hidden(region, mean.expand(region.shape), inner)

        self._edit(frames, index, box, change)

    def draw(self, frames: TorchFrames, index: int, box: Box, draw: Draw) -> None:
        def change(region: torch.Tensor) -> torch.Tensor:
            host = np.ascontiguousarray(self.download(region))
            draw(host)
            return self.upload(host)

        self._edit(frames, index, box, change)

    def crops(
        self, frames: TorchFrames, transforms: npt.NDArray[np.float64], frame_of: npt.NDArray[np.int64], size: int
    ) -> npt.NDArray[np.uint8]:
        bgr = self.ensure_bgr(frames)
        if not len(transforms):
            return np.zeros((0, size, size, 3), np.uint8)
        cut = []
        for transform, index in zip(transforms, frame_of.tolist(), strict=True):
            x1, y1, x2, y2 = _covered(transform, size, frames.height, frames.width, _MARGIN)
            shifted = transform.copy()
            shifted[:, 2] += shifted[:, :2] @ np.array([x1, y1], np.float64)
            matrix = torch.from_numpy(shifted[None]).to(self._device, torch.float32)
            patch = bgr[index, y1:y2, x1:x2].permute(2, 0, 1)[None].float()
            cut.append(warp_affine(patch, matrix, (size, size), mode="bilinear", padding_mode="border"))
        crops = torch.cat(cut).round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()
        return self.download(crops)

    def paste(
        self,
        frames: TorchFrames,
        crops: npt.NDArray[np.uint8],
        transforms: npt.NDArray[np.float64],
        frame_of: npt.NDArray[np.int64],
        masks: npt.NDArray[np.float32],
    ) -> None:
        self.ensure_bgr(frames)
        if not len(crops):
            return
        size = crops.shape[1]
        faces = self.upload(crops).permute(0, 3, 1, 2).float()
        weights = torch.from_numpy(np.array(masks, np.float32)).to(self._device)  # a copy: masks may be read-only
        for face, (transform, index) in enumerate(zip(transforms, frame_of.tolist(), strict=True)):
            box = _covered(transform, size, frames.height, frames.width, 0)
            x1, y1, x2, y2 = box
            if x2 <= x1 or y2 <= y1:
                continue
            inverse = np.zeros((2, 3), np.float64)
            inverse[:, :2] = np.linalg.inv(transform[:, :2])
            inverse[:, 2] = -(inverse[:, :2] @ transform[:, 2]) - np.array([x1, y1], np.float64)
            matrix = torch.from_numpy(inverse[None]).to(self._device, torch.float32)
            shape = (y2 - y1, x2 - x1)
            crop = warp_affine(faces[face : face + 1], matrix, shape, mode="bicubic", padding_mode="border")[0]
            mask = weights[face] if weights.ndim == 3 else weights
            alpha = warp_affine(mask[None, None], matrix, shape, mode="bilinear")[0].clamp(0, 1)

            def change(region: torch.Tensor, crop: torch.Tensor = crop, alpha: torch.Tensor = alpha) -> torch.Tensor:
                background = region.float()
                blended = background + (crop.permute(1, 2, 0).clamp(0, 255) - background) * alpha.permute(1, 2, 0)
                return blended.round().clamp(0, 255).to(torch.uint8)

            self._edit(frames, index, box, change)

    def upscale(self, frames: TorchFrames, enhancer: FrameEnhancer, percent: int) -> TorchFrames:
        bgr = self.ensure_bgr(frames).permute(0, 3, 1, 2)
        larger = blended(bgr, upscaled(enhancer, bgr), percent)
        return self.replace(frames, larger.permute(0, 2, 3, 1).contiguous())


def upscaled(enhancer: FrameEnhancer, bgr: torch.Tensor) -> torch.Tensor:
    """uint8 BGR ``[N, 3, H, W]`` → ``[N, 3, sH, sW]`` on the same device, through ``enhancer``'s tiles (the host's
    :class:`~workers.upscaling.Tiling`, cut and joined as tensors)."""
    tiling, scale = enhancer.tiling, enhancer.scale
    count, _, height, width = bgr.shape
    rows, cols = tiling.grid(height, width)
    tile, pad, core = tiling.tile, tiling.pad, tiling.core
    padded = F.pad(bgr.float(), (pad, pad + cols * core - width, pad, pad + rows * core - height), mode="replicate")
    corners = [(r * core, c * core) for r in range(rows) for c in range(cols)]  # row by row, as Tiling.split
    tiles = torch.stack([padded[:, :, y : y + tile, x : x + tile] for y, x in corners], dim=1).flatten(0, 1)
    done = cast(torch.Tensor, enhancer.batches.map(cast(Any, tiles), lambda b: _run_tiles(enhancer, b), torch.cat))
    side, pad, core = tile * scale, pad * scale, core * scale
    cores = done.view(count, rows, cols, 3, side, side)[..., pad : pad + core, pad : pad + core]
    joined = cores.permute(0, 3, 1, 4, 2, 5).reshape(count, 3, rows * core, cols * core)
    return joined[:, :, : height * scale, : width * scale]


def _run_tiles(enhancer: FrameEnhancer, tiles: torch.Tensor) -> torch.Tensor:
    """A batch of float BGR tiles (whole numbers 0…255) through the model: uint8 BGR tiles ``scale`` times larger;
    on a torch engine as tensors where they are, on another (ONNX Runtime, by a per-model override) through the
    host."""
    from workers.engines.batching import Indices, run_in_batches
    from workers.engines.torch_engine import TorchEngine

    engine = enhancer.engine
    if not isinstance(engine, TorchEngine):  # ONNX Runtime: through the host
        host = tiles.to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        return torch.from_numpy(enhancer.run_tiles(host)).to(tiles.device).permute(0, 3, 1, 2)
    mean, std = (torch.from_numpy(v).to(tiles.device) for v in (enhancer.mean, enhancer.std))
    normalised = ((tiles.flip(1) if enhancer.rgb else tiles) - mean) / std

    def inputs(items: Indices) -> dict[str, Any]:
        return {enhancer.input_name: normalised[torch.from_numpy(items).to(tiles.device)]}

    outputs = run_in_batches(engine, len(tiles), inputs, enhancer.fixed_batch, run=engine.run_on_device,
                             join=torch.cat)  # fmt: skip
    output = cast(torch.Tensor, outputs[0]).to(tiles.device, torch.float32)  # the engine's device may be another
    enhancer.check_output(tuple(output.shape))
    pixels = (output * std + mean + 0.5).clamp_(0, 255).to(torch.uint8)
    return pixels.flip(1) if enhancer.rgb else pixels


def blended(frames: torch.Tensor, larger: torch.Tensor, percent: int) -> torch.Tensor:
    """``percent`` of ``larger`` over ``frames`` (``[N, 3, H, W]``) resized to its size, as
    :func:`workers.upscaling.blend` does with OpenCV: a bilinear resize rounded to whole values, then a weighted
    sum rounded half to even."""
    if percent >= 100:
        return larger
    weight = percent / 100
    size = (larger.shape[2], larger.shape[3])
    resized = F.interpolate(frames.float(), size=size, mode="bilinear", align_corners=False).add_(0.5).floor_()
    mixed = larger.float().mul_(weight).add_(resized.mul_(1 - weight))
    return mixed.round_().clamp_(0, 255).to(torch.uint8)


def _covered(transform: npt.NDArray[np.float64], size: int, height: int, width: int, margin: int) -> Box:
    """The frame's pixels a ``size`` crop covers through the inverse of ``transform``, ``margin`` wider, clipped."""
    inverse = np.linalg.inv(transform[:, :2])
    corners = np.array([[0, 0], [size, 0], [size, size], [0, size]], dtype=np.float64)
    points = (corners - transform[:, 2]) @ inverse.T
    x1, y1 = (math.floor(v) - margin for v in points.min(axis=0).tolist())
    x2, y2 = (math.ceil(v) + margin for v in points.max(axis=0).tolist())
    return max(0, x1), max(0, y1), min(width, x2), min(height, y2)
