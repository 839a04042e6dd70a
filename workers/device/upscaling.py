"""``frame_enhancer`` on the device: the chain's frames upscaled where they are, as the host path's
:mod:`workers.upscaling` does it — the same overlapping tiles with the frame's edge repeated, the same model, the
tiles' cores put back together, ``blend`` percent over the frame resized bilinearly — and converted to the larger
frames' 4:2:0 planes there, which go down to the encoder.

The tiles go through a torch engine as tensors on the device (:meth:`~workers.engines.torch_engine.TorchEngine.
run_on_device`); a model on another engine (ONNX Runtime, by a per-model override) gets them through the host. On
the CPU, where the frames are the host's own memory, the stage is the host path's own code (numpy, OpenCV), which is
the same arithmetic and there the faster kernel, as the crops' warps are (:mod:`workers.device.cropping`).
"""

from __future__ import annotations

from typing import Any, cast

import cv2
import numpy as np
import torch
import torch.nn.functional as F

from workers.device.colour import bgr_to_yuv420
from workers.device.feed import DeviceFrames
from workers.engines.batching import Indices, run_in_batches
from workers.engines.torch_engine import TorchEngine
from workers.upscaling import FrameEnhancer, blend

__all__ = ["enhance_frames", "upscale"]


def enhance_frames(frames: DeviceFrames, enhancer: FrameEnhancer, percent: int) -> None:
    """Replace the batch's planes with those of its frames upscaled by ``enhancer`` and blended ``percent`` over
    the frames resized to the same size. The batch's BGR frames are left at their size: the enhancer is the
    chain's last processor, nothing reads them after it."""
    if frames.shared:
        host = frames.host
        upscaled = blend(host, enhancer.upscale(host), percent)
        planes = np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in upscaled])
        frames.planes = torch.from_numpy(planes)
        return
    frames.planes = bgr_to_yuv420(blended(frames.bgr, upscale(enhancer, frames.bgr), percent))


def upscale(enhancer: FrameEnhancer, bgr: torch.Tensor) -> torch.Tensor:
    """uint8 BGR ``[N, 3, H, W]`` → ``[N, 3, sH, sW]`` on the same device, through ``enhancer``'s tiles."""
    tiling, scale = enhancer.tiling, enhancer.scale
    count, _, height, width = bgr.shape
    rows, cols = tiling.grid(height, width)
    tile, pad, core = tiling.tile, tiling.pad, tiling.core
    padded = F.pad(bgr.float(), (pad, pad + cols * core - width, pad, pad + rows * core - height), mode="replicate")
    corners = [(r * core, c * core) for r in range(rows) for c in range(cols)]  # row by row, as Tiling.split
    tiles = torch.stack([padded[:, :, y : y + tile, x : x + tile] for y, x in corners], dim=1).flatten(0, 1)
    upscaled = cast(torch.Tensor, enhancer.batches.map(cast(Any, tiles), lambda b: _run(enhancer, b), torch.cat))
    side, pad, core = tile * scale, pad * scale, core * scale
    cores = upscaled.view(count, rows, cols, 3, side, side)[..., pad : pad + core, pad : pad + core]
    joined = cores.permute(0, 3, 1, 4, 2, 5).reshape(count, 3, rows * core, cols * core)
    return joined[:, :, : height * scale, : width * scale]


def _run(enhancer: FrameEnhancer, tiles: torch.Tensor) -> torch.Tensor:
    """A batch of float BGR tiles (whole numbers 0…255) through the model: uint8 BGR tiles ``scale`` times larger."""
    engine = enhancer.engine
    if not isinstance(engine, TorchEngine):  # ONNX Runtime: through the host
        host = tiles.to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        done = torch.from_numpy(enhancer.run_tiles(host)).to(tiles.device)
        return done.permute(0, 3, 1, 2)
    mean, std = (torch.from_numpy(v).to(tiles.device) for v in (enhancer.mean, enhancer.std))
    normalised = ((tiles.flip(1) if enhancer.rgb else tiles) - mean) / std

    def inputs(items: Indices) -> dict[str, Any]:
        return {enhancer.input_name: normalised[torch.from_numpy(items).to(tiles.device)]}

    run = engine.run_on_device
    outputs = run_in_batches(engine, len(tiles), inputs, enhancer.fixed_batch, run=run, join=torch.cat)
    output = cast(torch.Tensor, outputs[0]).to(tiles.device, torch.float32)  # the engine's device may be another
    enhancer.check_output(tuple(output.shape))
    pixels = (output * std + mean + 0.5).clamp_(0, 255).to(torch.uint8)
    return pixels.flip(1) if enhancer.rgb else pixels


def blended(frames: torch.Tensor, upscaled: torch.Tensor, percent: int) -> torch.Tensor:
    """``percent`` of ``upscaled`` over ``frames`` resized to its size, as :func:`workers.upscaling.blend` does with
    OpenCV: a bilinear resize rounded to whole values, then a weighted sum rounded half to even."""
    if percent >= 100:
        return upscaled
    weight = percent / 100
    size = (upscaled.shape[2], upscaled.shape[3])
    resized = F.interpolate(frames.float(), size=size, mode="bilinear", align_corners=False).add_(0.5).floor_()
    mixed = upscaled.float().mul_(weight).add_(resized.mul_(1 - weight))
    return mixed.round_().clamp_(0, 255).to(torch.uint8)
