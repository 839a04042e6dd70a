"""4:2:0 planes ↔ BGR on the device, the conversions the frame pipe does with OpenCV on the host.

The coefficients are OpenCV's (BT.601, limited range, ``COLOR_YUV2BGR_I420`` / ``COLOR_BGR2YUV_I420``): chroma is
replicated over each 2×2 block on the way in, taken from its top-left pixel on the way out, both in OpenCV's
fixed point: the same values to the bit, so that the two paths give the same frames.
"""

from __future__ import annotations

import torch

__all__ = ["bgr_to_yuv420", "cut_planes", "even_region", "paste_planes", "yuv420_to_bgr", "yuv420_to_bgr_hwc"]

# OpenCV's fixed-point BT.601 limited-range coefficients (ITUR_BT_601_*, scaled by 2**20)
_SHIFT = 20
_CY, _CUB, _CUG, _CVG, _CVR = 1220542, 2116026, -409993, -852492, 1673527
_RY, _GY, _BY = 269484, 528482, 102760
_RU, _GU, _BU = -155188, -305135, 460324  # V's red coefficient is U's blue one (0.439)
_GV, _BV = -385875, -74448


def yuv420_to_bgr(raw: torch.Tensor) -> torch.Tensor:
    """Frames as they come off the pipe — uint8 ``[N, H*3/2, W]`` (Y, then U, then V, planar) — as float32 BGR
    ``[N, 3, H, W]`` holding whole numbers in 0…255: exactly the values of OpenCV's ``COLOR_YUV2BGR_I420``, in its
    fixed-point arithmetic, so that the detector sees the same pixels on either path (and finds the same faces)."""
    return yuv420_to_bgr_hwc(raw).permute(0, 3, 1, 2).to(torch.float32)


def yuv420_to_bgr_hwc(raw: torch.Tensor) -> torch.Tensor:
    """:func:`yuv420_to_bgr` as uint8 ``[N, H, W, 3]`` (OpenCV's layout, what the host's stages take)."""
    count, rows, width = raw.shape
    height = rows * 2 // 3
    y = raw[:, :height].to(torch.int32).sub_(16).clamp_min_(0).mul_(_CY)
    blocks = y.view(count, height // 2, 2, width // 2, 2)  # each 2×2 block shares its chroma: broadcast, no copy
    chroma = raw[:, height:].reshape(count, 2, height // 2, width // 2).to(torch.int32).sub_(128)
    u, v = chroma[:, 0], chroma[:, 1]
    half = 1 << (_SHIFT - 1)
    out = torch.empty(count, height // 2, 2, width // 2, 2, 3, dtype=torch.uint8, device=raw.device)
    for channel, term in enumerate((u * _CUB + half, u * _CUG + v * _CVG + half, v * _CVR + half)):
        value = (blocks + term[:, :, None, :, None]).bitwise_right_shift_(_SHIFT).clamp_(0, 255)
        out[..., channel] = value
    return out.view(count, height, width, 3)


def bgr_to_yuv420(frames: torch.Tensor) -> torch.Tensor:
    """BGR ``[N, 3, H, W]`` in 0…255 (float holding whole numbers, or uint8; even sizes) as uint8 4:2:0 planes
    ``[N, H*3/2, W]``, ready for the encoder's pipe: exactly OpenCV's ``COLOR_BGR2YUV_I420`` (its fixed point; the
    chroma of each 2×2 block is its top-left pixel's, as OpenCV takes it)."""
    count, _, height, width = frames.shape
    b, g, r = frames.to(torch.int32).unbind(1)
    half = 1 << (_SHIFT - 1)
    y = (r * _RY + g * _GY + b * _BY + (half + (16 << _SHIFT))).bitwise_right_shift_(_SHIFT)
    b, g, r = b[:, ::2, ::2], g[:, ::2, ::2], r[:, ::2, ::2]
    u = (r * _RU + g * _GU + b * _BU + (half + (128 << _SHIFT))).bitwise_right_shift_(_SHIFT)
    v = (r * _BU + g * _GV + b * _BV + (half + (128 << _SHIFT))).bitwise_right_shift_(_SHIFT)
    chroma = torch.stack([u, v], dim=1).reshape(count, height // 2, width)
    return torch.cat([y, chroma], dim=1).clamp_(0, 255).to(torch.uint8)


def cut_planes(frame: torch.Tensor, x1: int, y1: int, x2: int, y2: int) -> torch.Tensor:
    """The planes of the even-aligned rectangle ``x1, y1, x2, y2`` of one frame's planes ``[H*3/2, W]``, as a
    small frame of its own ``[h*3/2, w]`` (a copy)."""
    height, width = frame.shape[0] * 2 // 3, frame.shape[1]
    chroma = frame[height:].reshape(2, height // 2, width // 2)[:, y1 // 2 : y2 // 2, x1 // 2 : x2 // 2]
    return torch.cat([frame[y1:y2, x1:x2], chroma.reshape((y2 - y1) // 2, x2 - x1)], dim=0)


def paste_planes(frame: torch.Tensor, small: torch.Tensor, x1: int, y1: int, x2: int, y2: int) -> None:
    """Write ``small`` (planes of the even-aligned rectangle, as :func:`cut_planes` gives them) into ``frame``'s
    planes, in place."""
    height, width = frame.shape[0] * 2 // 3, frame.shape[1]
    rows = y2 - y1
    frame[y1:y2, x1:x2] = small[:rows]
    chroma = frame[height:].view(2, height // 2, width // 2)
    chroma[:, y1 // 2 : y2 // 2, x1 // 2 : x2 // 2] = small[rows:].reshape(2, rows // 2, (x2 - x1) // 2)


def even_region(x1: int, y1: int, x2: int, y2: int, height: int, width: int) -> tuple[int, int, int, int]:
    """The rectangle widened to whole 2×2 chroma blocks (the unit a 4:2:0 region converts in)."""
    return x1 & ~1, y1 & ~1, min(width, (x2 + 1) & ~1), min(height, (y2 + 1) & ~1)
