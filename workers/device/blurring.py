"""``face_blur`` on the device: each face's box Gaussian-blurred inside the frames, as the host path does with
``cv2.GaussianBlur`` (same kernel, same reflect-101 border at the box's edges, so the frames agree to rounding)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from kornia.filters import get_gaussian_kernel1d

from shared.options import BlurStyle
from workers.device.colour import bgr_to_yuv420, cut_planes, even_region, paste_planes, yuv420_to_bgr
from workers.faces.detection import Face
from workers.processors.face_blur import face_region, grown_region

__all__ = ["blur_faces", "blur_faces_in_planes", "gaussian_kernel", "soft_mask"]

# OpenCV's fixed kernels for sides up to 9 when sigma is derived from the side (getGaussianKernel's table).
_SMALL = {
    1: [1.0],
    3: [0.25, 0.5, 0.25],
    5: [0.0625, 0.25, 0.375, 0.25, 0.0625],
    7: [0.03125, 0.109375, 0.21875, 0.28125, 0.21875, 0.109375, 0.03125],
    9: [0.015625, 0.05078125, 0.1171875, 0.19921875, 0.234375, 0.19921875, 0.1171875, 0.05078125, 0.015625],
}
# fmt: skip


def gaussian_kernel(side: int, device: torch.device) -> torch.Tensor:
    """The 1-D kernel ``cv2.GaussianBlur`` uses for an odd ``side`` and sigma 0 (derived from the side)."""
    if side in _SMALL:
        return torch.tensor(_SMALL[side], dtype=torch.float32, device=device)
    sigma = 0.3 * ((side - 1) * 0.5 - 1) + 0.8
    return get_gaussian_kernel1d(side, sigma, device=device, dtype=torch.float32).reshape(-1)


def _reflect101(length: int, pad: int, device: torch.device) -> torch.Tensor:
    """Indices of ``range(-pad, length + pad)`` folded back into ``0…length-1`` as OpenCV's default border does
    (``gfedcb|abcdefgh|gfedcba``), for any ``pad``, even one longer than the side."""
    index = torch.arange(-pad, length + pad, device=device)
    if length == 1:
        return torch.zeros_like(index)
    period = 2 * (length - 1)
    index = index.remainder(period)
    return torch.where(index >= length, period - index, index)


def _blur_matrix(length: int, side: int, device: torch.device) -> torch.Tensor:
    """``[length, length]``: row ``i`` holds the kernel's weights on the pixels it reads for output ``i``, the
    reflected border folded in, so one matrix product blurs a whole axis."""
    kernel = gaussian_kernel(side, device)
    sources = _reflect101(length, side // 2, device).unfold(0, side, 1)  # [length, side]: what each output reads
    matrix = torch.zeros(length, length, device=device)
    return matrix.scatter_add_(1, sources, kernel.expand(length, side))


def _blur(region: torch.Tensor, side: int) -> torch.Tensor:
    """``region`` float [C, h, w] blurred by the separable ``side``×``side`` kernel: two matrix products (fast on
    every device, unlike a depthwise convolution with a long kernel on the CPU)."""
    _, height, width = region.shape
    columns = _blur_matrix(width, side, region.device)
    rows = _blur_matrix(height, side, region.device)
    return rows @ region @ columns.T


def blur_faces(frames: torch.Tensor, faces: Sequence[Sequence[Face]], strength: float) -> torch.Tensor:
    """``frames`` (float BGR ``[N, 3, H, W]`` on the device) with each face's box blurred, in place; returned.

    Args:
        frames: the batch, modified in place.
        faces: per frame, the faces to blur.
        strength: the kernel side as a fraction of the box's longer side (``FaceOptions.blur_strength``).
    """
    shape = (frames.shape[2], frames.shape[3])
    for index, found in enumerate(faces):
        source = frames[index].clone() if len(found) > 1 else frames[index]  # boxes may overlap: blur the original
        for face in found:
            x1, y1, x2, y2 = face_region(face, shape)
            if x2 <= x1 or y2 <= y1:
                continue
            side = max(3, int(strength * max(x2 - x1, y2 - y1)) | 1)
            frames[index, :, y1:y2, x1:x2] = _blur(source[:, y1:y2, x1:x2], side).round()
    return frames


def soft_mask(height: int, width: int, inner: tuple[int, int, int, int], device: torch.device) -> torch.Tensor:
    """1 inside ``inner`` (x1, y1, x2, y2 within the region), falling linearly to 0 at the region's edge: the host
    path's soft edge (:func:`workers.processors.face_blur._soft_mask`), ``[h, w]``."""
    x1, y1, x2, y2 = inner

    def ramp(extent: int, lo: int, hi: int) -> torch.Tensor:
        pos = torch.arange(extent, dtype=torch.float32, device=device)
        ones = torch.ones_like(pos)
        before = ((pos + 1) / max(lo, 1)).clamp(0, 1) if lo > 0 else ones
        after = ((extent - pos) / max(extent - hi, 1)).clamp(0, 1) if hi < extent else ones
        return torch.minimum(before, after)

    return ramp(height, y1, y2)[:, None] * ramp(width, x1, x2)[None, :]


def blur_faces_in_planes(
    planes: torch.Tensor,
    faces: Sequence[Sequence[Face]],
    strength: float,
    *,
    style: BlurStyle = "blur",
    margin: float = 0.0,
) -> torch.Tensor:
    """``face_blur`` on 4:2:0 planes (uint8 ``[N, H*3/2, W]`` on the device), in place; returned.

    Only the faces' regions are converted (to BGR, hidden, back to 4:2:0), each widened to whole 2×2 chroma
    blocks; every other pixel passes through untouched. The work grows with the faces' area, not the frame's.
    Faces are hidden one after the other, each on the frame as the ones before left it, as the host path does.

    Args:
        style: ``blur`` or ``fill`` (``pixelate`` runs on the host path only).
        margin: each side of the box grows by this fraction of its size; the edge fades out within the margin.
    """
    if style not in ("blur", "fill"):
        raise ValueError(f"blur style {style} has no device path")
    count, rows, width = planes.shape
    height = rows * 2 // 3
    for index, found in enumerate(faces):
        for face in found:
            x1, y1, x2, y2 = grown_region(face, margin, (height, width))
            if x2 <= x1 or y2 <= y1:
                continue
            ex1, ey1, ex2, ey2 = even_region(x1, y1, x2, y2, height, width)
            region = yuv420_to_bgr(cut_planes(planes[index], ex1, ey1, ex2, ey2).unsqueeze(0))[0]
            inner = region[:, y1 - ey1 : y2 - ey1, x1 - ex1 : x2 - ex1]
            if style == "fill":  # the region's mean colour, truncated as numpy's astype(uint8)
                hidden = inner.mean(dim=(1, 2), keepdim=True).floor().expand_as(inner)
            else:
                side = max(3, int(strength * max(x2 - x1, y2 - y1)) | 1)
                hidden = _blur(inner, side).round()
            if margin > 0:
                bx1, by1, bx2, by2 = face_region(face, (height, width))
                alpha = soft_mask(y2 - y1, x2 - x1, (bx1 - x1, by1 - y1, bx2 - x1, by2 - y1), planes.device)
                hidden = (hidden * alpha + inner * (1 - alpha) + 0.5).floor().clamp(0, 255)
            region[:, y1 - ey1 : y2 - ey1, x1 - ex1 : x2 - ex1] = hidden
            paste_planes(planes[index], bgr_to_yuv420(region.unsqueeze(0))[0], ex1, ey1, ex2, ey2)
    return planes
