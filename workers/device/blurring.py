"""``face_blur`` on the device: each face's box hidden inside the frames as the host path hides it — Gaussian-blurred
as ``cv2.GaussianBlur`` does (same kernel, same reflect-101 border at the box's edges, so the frames agree to
rounding), pixelated as ``cv2.resize`` does it (``INTER_AREA`` down, ``INTER_NEAREST`` back up, with OpenCV's
weights, sums and rounding: the same values), or filled with its mean colour."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from functools import cache

import numpy as np
import torch
from kornia.filters import get_gaussian_kernel1d

from shared.options import BlurStyle
from workers.device.colour import bgr_to_yuv420, cut_planes, even_region, paste_planes, yuv420_to_bgr
from workers.faces.detection import Face
from workers.processors.face_blur import face_region, grown_region

__all__ = ["blur_faces", "blur_faces_in_planes", "gaussian_kernel", "pixelate", "soft_mask"]

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


@cache
def _area_table(source: int, target: int) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenCV's ``INTER_AREA`` table for shrinking one axis from ``source`` to ``target`` pixels
    (``computeResizeAreaTab``): for each output, the sources it reads and their float32 weights, ``[target, K]``
    each, in the order OpenCV adds them (zero weights pad the shorter rows: adding ``0`` changes no sum)."""
    scale = 1.0 / (target / source)  # as cv::resize derives it, from the inverse scale
    rows: list[list[tuple[int, float]]] = []
    for out in range(target):
        start = out * scale
        end = start + scale
        cell = min(scale, source - start)
        last = min(math.floor(end), source - 1)
        first = min(math.ceil(start), last)
        row = [(first - 1, (first - start) / cell)] if first - start > 1e-3 else []
        row += [(index, 1.0 / cell) for index in range(first, last)]
        if end - last > 1e-3:
            row.append((last, min(end - last, 1.0, cell) / cell))
        rows.append(row)
    width = max(len(row) for row in rows)
    indices = np.zeros((target, width), np.int64)
    weights = np.zeros((target, width), np.float32)  # each weight rounded to float32, as OpenCV stores it
    for out, row in enumerate(rows):
        for k, (index, weight) in enumerate(row):
            indices[out, k], weights[out, k] = index, weight
    return torch.from_numpy(indices), torch.from_numpy(weights)


def _shrink(region: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``cv2.resize(region, (width, height), interpolation=cv2.INTER_AREA)`` for a float ``[C, h, w]`` region of
    whole numbers (0…255) and a smaller or equal size: OpenCV's two paths, step for step in float32 so that the
    rounding lands where OpenCV's does."""
    _, rows, columns = region.shape
    scale_x, scale_y = 1.0 / (width / columns), 1.0 / (height / rows)
    step_x, step_y = round(scale_x), round(scale_y)
    epsilon = sys.float_info.epsilon  # OpenCV's DBL_EPSILON test for whole-block scales
    if abs(scale_x - step_x) < epsilon and abs(scale_y - step_y) < epsilon:
        # whole blocks (resizeAreaFast): an integer sum per block; 2×2 rounds half up, others through float32
        sums = region.reshape(-1, height, step_y, width, step_x).sum(dim=(2, 4))
        if step_x == step_y == 2:
            return ((sums + 2) / 4).floor()
        return (sums * (torch.ones((), dtype=torch.float32) / (step_x * step_y))).round()
    # fractional cells (ResizeArea_Invoker): each row's weighted sums across, then the rows' weighted sums down;
    # every term at once, then added one at a time in OpenCV's order (float32 sums are not associative)
    x_index, x_weight = (t.to(region.device) for t in _area_table(columns, width))
    y_index, y_weight = (t.to(region.device) for t in _area_table(rows, height))
    terms = region[:, :, x_index] * x_weight  # [C, h, width, K]
    across = terms[..., 0].clone()
    for k in range(1, terms.shape[-1]):
        across += terms[..., k]
    terms = across[:, y_index, :] * y_weight[:, :, None]  # [C, height, K, width]
    down = terms[:, :, 0].clone()
    for k in range(1, terms.shape[2]):
        down += terms[:, :, k]
    return down.round()  # saturate_cast<uchar>(float): round half to even, as torch rounds


@cache
def _nearest(count: int, source: int) -> torch.Tensor:
    """``INTER_NEAREST``'s source for each of ``count`` outputs from ``source`` pixels (OpenCV's resizeNN)."""
    inverse = 1.0 / (count / source)
    return torch.tensor([min(math.floor(out * inverse), source - 1) for out in range(count)])


def pixelate(region: torch.Tensor, strength: float) -> torch.Tensor:
    """``region`` (float ``[C, h, w]``, whole numbers) pixelated as the host path's ``blur_style: pixelate``:
    blocks of about ``strength / 4`` of its longer side, each the area mean of its pixels, drawn back at full size
    by nearest neighbour. A new tensor."""
    _, height, width = region.shape
    block = max(2, round(strength / 4 * max(height, width)))
    small = _shrink(region, max(1, height // block), max(1, width // block))
    rows, columns = _nearest(height, small.shape[1]), _nearest(width, small.shape[2])
    return small[:, rows.to(region.device)][:, :, columns.to(region.device)]


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
    bgr: torch.Tensor | None = None,
) -> torch.Tensor:
    """``face_blur`` on 4:2:0 planes (uint8 ``[N, H*3/2, W]`` on the device), in place; returned.

    Only the faces' regions are converted (to BGR, hidden, back to 4:2:0), each widened to whole 2×2 chroma
    blocks; every other pixel passes through untouched. The work grows with the faces' area, not the frame's.
    Faces are hidden one after the other, each on the frame as the ones before left it, as the host path does (where
    regions overlap, in the BGR values the earlier face left, not as they convert back from the planes).

    Args:
        style: ``blur``, ``pixelate`` or ``fill``.
        margin: each side of the box grows by this fraction of its size; the edge fades out within the margin.
        bgr: the batch's BGR frames (uint8 ``[N, 3, H, W]``) to keep in step for the chain's later processors:
            each hidden region is written there too, as the OpenCV path's frames have it.
    """
    count, rows, width = planes.shape
    height = rows * 2 // 3
    for index, found in enumerate(faces):
        done: list[tuple[tuple[int, int, int, int], torch.Tensor]] = []  # the frame's hidden regions, in BGR
        for face in found:
            x1, y1, x2, y2 = grown_region(face, margin, (height, width))
            if x2 <= x1 or y2 <= y1:
                continue
            ex1, ey1, ex2, ey2 = even_region(x1, y1, x2, y2, height, width)
            region = yuv420_to_bgr(cut_planes(planes[index], ex1, ey1, ex2, ey2).unsqueeze(0))[0]
            _overlay(region, (ex1, ey1, ex2, ey2), done)
            inner = region[:, y1 - ey1 : y2 - ey1, x1 - ex1 : x2 - ex1]
            if style == "fill":  # the region's mean colour, truncated as numpy's astype(uint8)
                hidden = inner.mean(dim=(1, 2), keepdim=True).floor().expand_as(inner)
            elif style == "pixelate":
                hidden = pixelate(inner, strength)
            else:
                side = max(3, int(strength * max(x2 - x1, y2 - y1)) | 1)
                hidden = _blur(inner, side).round()
            if margin > 0:
                bx1, by1, bx2, by2 = face_region(face, (height, width))
                alpha = soft_mask(y2 - y1, x2 - x1, (bx1 - x1, by1 - y1, bx2 - x1, by2 - y1), planes.device)
                hidden = (hidden * alpha + inner * (1 - alpha) + 0.5).floor().clamp(0, 255)
            region[:, y1 - ey1 : y2 - ey1, x1 - ex1 : x2 - ex1] = hidden
            if bgr is not None:
                bgr[index, :, y1:y2, x1:x2] = hidden.to(torch.uint8)
            paste_planes(planes[index], bgr_to_yuv420(region.unsqueeze(0))[0], ex1, ey1, ex2, ey2)
            done.append(((ex1, ey1, ex2, ey2), region))
    return planes


def _overlay(
    region: torch.Tensor, at: tuple[int, int, int, int], done: list[tuple[tuple[int, int, int, int], torch.Tensor]]
) -> None:
    """Where ``region`` (BGR of the frame's rectangle ``at``, converted from the planes) overlaps regions hidden
    before it, their BGR values instead: what the host path's frame holds there (the planes hold them only as
    4:2:0, which does not convert back to the same BGR)."""
    x1, y1, x2, y2 = at
    for (dx1, dy1, dx2, dy2), earlier in done:
        ox1, oy1, ox2, oy2 = max(x1, dx1), max(y1, dy1), min(x2, dx2), min(y2, dy2)
        if ox1 < ox2 and oy1 < oy2:
            region[:, oy1 - y1 : oy2 - y1, ox1 - x1 : ox2 - x1] = earlier[
                :, oy1 - dy1 : oy2 - dy1, ox1 - dx1 : ox2 - dx1
            ]
