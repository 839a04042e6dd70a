"""4:2:0 planes ↔ BGR on the device, the conversions the frame pipe does with OpenCV on the host.

The coefficients are OpenCV's (BT.601, limited range, ``COLOR_YUV2BGR_I420`` / ``COLOR_BGR2YUV_I420``): chroma is
replicated over each 2×2 block on the way in and averaged over it on the way out, so a frame that goes through
either path comes out the same to within rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["bgr_to_yuv420", "yuv420_to_bgr"]

# rows B, G, R; columns U, V (OpenCV's BT.601 limited-range coefficients)
_TO_BGR = torch.tensor([[2.018, 0.0], [-0.391, -0.813], [0.0, 1.596]])
# rows Y, U, V; columns B, G, R
_TO_YUV = torch.tensor([[0.098, 0.504, 0.257], [0.439, -0.291, -0.148], [-0.071, -0.368, 0.439]])


def yuv420_to_bgr(raw: torch.Tensor) -> torch.Tensor:
    """Frames as they come off the pipe — uint8 ``[N, H*3/2, W]`` (Y, then U, then V, planar) — as float32 BGR
    ``[N, 3, H, W]`` holding whole numbers in 0…255, the values OpenCV's uint8 conversion gives."""
    count, rows, width = raw.shape
    height = rows * 2 // 3
    y = raw[:, :height].to(torch.float32).sub_(16.0).clamp_min_(0.0).mul_(1.164).unsqueeze(1)  # [N, 1, H, W]
    chroma = raw[:, height:].reshape(count, 2, height // 2, width // 2).to(torch.float32).sub_(128.0)
    # each channel's chroma term at chroma resolution, then spread over its 2×2 block (a view, no copy)
    offsets = torch.einsum("cu,nuhw->nchw", _TO_BGR.to(raw.device), chroma)
    spread = offsets[:, :, :, None, :, None].expand(count, 3, height // 2, 2, width // 2, 2)
    bgr = y + spread.reshape(count, 3, height, width)
    return bgr.round_().clamp_(0.0, 255.0)


def bgr_to_yuv420(frames: torch.Tensor) -> torch.Tensor:
    """Float BGR ``[N, 3, H, W]`` in 0…255 (even sizes) as uint8 4:2:0 planes ``[N, H*3/2, W]``, ready for the
    encoder's pipe."""
    count, _, height, width = frames.shape
    frames = frames.to(torch.float32)
    coefficients = _TO_YUV.to(frames.device)
    y = torch.einsum("kc,nchw->nkhw", coefficients[:1], frames).add_(16.0).reshape(count, height, width)
    # chroma is linear in BGR: the 2×2 block's mean colour gives the block's mean chroma
    chroma = torch.einsum("kc,nchw->nkhw", coefficients[1:], F.avg_pool2d(frames, 2)).add_(128.0)
    planes = torch.cat([y, chroma.reshape(count, height // 2, width)], dim=1)
    return planes.round_().clamp_(0, 255).to(torch.uint8)
