"""``face_debugger`` on the device: each face's box, five points, score and (with a 68-point landmarker) 68 points
drawn into the batch's BGR frames on the device, the same pixels in the same colours as the host path's OpenCV
calls (:func:`workers.processors.face_debugger.draw_faces`), then each face's touched region stored back into the
planes (:meth:`DeviceFrames.store`).

Boxes and points are drawn with ``LINE_8``, without anti-aliasing: every pixel of such a mark takes its colour, so
the marks are sets of pixels, and OpenCV's sets are reproduced exactly:

- a filled ``cv2.circle`` of radius ``r`` is OpenCV's midpoint disc (:func:`disc`, its rows worked out once per
  radius);
- ``cv2.rectangle`` of thickness 1 is the one-pixel outline; thicker, each side is a band of
  ``(t + t % 2) // 2`` pixels either side of it (OpenCV's thick polyline: a filled quadrilateral per side) with a
  disc of radius ``(t + 1) // 2`` on each corner (its round joins).

Those pixel lists come from the faces (host data) with numpy; the frames are painted on the device, one indexed
write per colour for the batch. The score is text, and OpenCV 5's ``putText`` blends its glyphs' edges into the
pixels under them (whatever the line type), in a rasteriser of its own: each score is drawn by ``cv2.putText`` on
the host onto a copy of the small patch of the frame under it (:func:`glyphs` says where its strokes fall), and
the patch written back.

The host draws face after face: all 68 points first, then per face its box, five points and score. Drawing every
box, then every five points, then every score gives the same frame unless a face's marks lie under a later face's
(:func:`_in_order`); such a frame is then redrawn face by face, in the host's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import torch

from workers.device.feed import DeviceFrames
from workers.faces.detection import Face
from workers.processors.face_debugger import (
    BOX_COLOUR,
    FONT,
    LANDMARK_68_COLOUR,
    LANDMARK_COLOUR,
    box_corners,
    font_scale,
    mark_thickness,
    score_label,
)

__all__ = ["disc", "draw_marks", "glyphs", "outline"]

Pixels = npt.NDArray[np.int64]
"""``[P, 2]``: x, y of each pixel of a mark (or offsets from its anchor)."""

_NONE: Pixels = np.zeros((0, 2), np.int64)


@cache
def disc(radius: int) -> Pixels:
    """The offsets from its centre of the pixels ``cv2.circle(image, centre, radius, colour, -1)`` fills: OpenCV's
    integer midpoint circle (``Circle`` in its drawing code), whose every step fills two pairs of rows."""
    half = np.full(2 * radius + 1, -1, np.int64)  # per row (offset + radius), how far the row reaches either side
    err, dx, dy, plus, minus = 0, radius, 0, 1, 2 * radius - 1
    while dx >= dy:
        for row, reach in ((dy, dx), (-dy, dx), (dx, dy), (-dx, dy)):
            half[row + radius] = max(half[row + radius], reach)
        dy += 1
        err += plus
        plus += 2
        if err > 0:
            err -= minus
            dx -= 1
            minus -= 2
    offsets = [(x, row - radius) for row, reach in enumerate(half.tolist()) for x in range(-reach, reach + 1)]
    pixels = np.array(offsets, np.int64).reshape(-1, 2)
    pixels.setflags(write=False)
    return pixels


@cache
def glyphs(text: str, thickness: int) -> Pixels:
    """The offsets from its bottom-left origin of the pixels ``cv2.putText`` draws ``text`` with, in the debugger's
    font at ``thickness`` (rendered once on the host, into a mask with room around the text for the strokes)."""
    scale = font_scale(thickness)
    (width, height), baseline = cv2.getTextSize(text, FONT, scale, thickness)
    pad = 4 * thickness + 4
    canvas = np.zeros((height + baseline + 2 * pad, width + 2 * pad), np.uint8)
    origin = (pad, pad + height)
    cv2.putText(canvas, text, origin, FONT, scale, 255, thickness)
    ys, xs = np.nonzero(canvas)
    pixels = np.stack([xs - origin[0], ys - origin[1]], axis=1).astype(np.int64)
    pixels.setflags(write=False)
    return pixels


def _filled(rectangles: npt.NDArray[np.int64]) -> Pixels:
    """Every pixel of ``[R, 4]`` filled rectangles (x1, y1, x2, y2, inclusive; empty where x2 < x1 or y2 < y1)."""
    widths = np.maximum(rectangles[:, 2] - rectangles[:, 0] + 1, 0)
    heights = np.maximum(rectangles[:, 3] - rectangles[:, 1] + 1, 0)
    counts = widths * heights
    owner = np.repeat(np.arange(len(rectangles)), counts)
    step = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    xs = rectangles[owner, 0] + step % widths[owner]
    ys = rectangles[owner, 1] + step // widths[owner]
    return np.stack([xs, ys], axis=1)


def outline(corners: tuple[int, int, int, int], thickness: int) -> Pixels:
    """The pixels ``cv2.rectangle(image, (x1, y1), (x2, y2), colour, thickness)`` draws (before the frame clips
    them): four bands along the sides, with round corners when thicker than one."""
    x1, y1, x2, y2 = corners
    reach = (thickness + thickness % 2) // 2 if thickness > 1 else 0
    left, right, top, bottom = min(x1, x2), max(x1, x2), min(y1, y2), max(y1, y2)
    bands = [
        [left, y1 - reach, right, y1 + reach],
        [left, y2 - reach, right, y2 + reach],
        [x1 - reach, top, x1 + reach, bottom],
        [x2 - reach, top, x2 + reach, bottom],
    ]
    pixels = [_filled(np.array(bands, np.int64))]
    if thickness > 1:
        corner = disc((thickness + 1) // 2)
        pixels += [corner + np.array(point, np.int64) for point in ((x1, y1), (x2, y1), (x2, y2), (x1, y2))]
    return np.concatenate(pixels)


Bounds = tuple[int, int, int, int]
"""``x1, y1, x2, y2`` (inclusive) around a mark's pixels."""

_EMPTY: Bounds = (1 << 40, 1 << 40, -(1 << 40), -(1 << 40))  # the bounds of no pixel: they meet nothing


def _within(pixels: Pixels, bounds: Bounds, height: int, width: int) -> Pixels:
    """The pixels inside the frame (all of them, without a test, where their bounds are)."""
    x1, y1, x2, y2 = bounds
    if x1 >= 0 and y1 >= 0 and x2 < width and y2 < height:
        return pixels
    keep = (pixels[:, 0] >= 0) & (pixels[:, 0] < width) & (pixels[:, 1] >= 0) & (pixels[:, 1] < height)
    return pixels[keep]


def _centres(points: npt.NDArray[np.floating[Any]]) -> Pixels:
    """Points rounded to whole pixels as the host rounds them (Python's ``round``: half to even)."""
    return np.round(np.asarray(points, np.float64)).astype(np.int64).reshape(-1, 2)


def _stamped(centres: Pixels, radius: int) -> tuple[Pixels, Bounds]:
    """A disc of ``radius`` at every centre, and the bounds of them all."""
    if not len(centres):
        return _NONE, _EMPTY
    pixels = (centres[:, None, :] + disc(radius)[None, :, :]).reshape(-1, 2)
    (x1, y1), (x2, y2) = centres.min(axis=0) - radius, centres.max(axis=0) + radius
    return pixels, (int(x1), int(y1), int(x2), int(y2))


@cache
def _glyph_bounds(text: str, thickness: int) -> Bounds:
    pixels = glyphs(text, thickness)
    if not len(pixels):
        return _EMPTY
    (x1, y1), (x2, y2) = pixels.min(axis=0), pixels.max(axis=0)
    return int(x1), int(y1), int(x2), int(y2)


def _shifted(bounds: Bounds, x: int, y: int) -> Bounds:
    return bounds if bounds == _EMPTY else (bounds[0] + x, bounds[1] + y, bounds[2] + x, bounds[3] + y)


def _clipped(bounds: Bounds, height: int, width: int) -> Bounds:
    x1, y1, x2, y2 = bounds
    return max(x1, 0), max(y1, 0), min(x2, width - 1), min(y2, height - 1)


@dataclass
class _Marks:
    """One face's marks in one frame: each as its pixels in the frame and its bounds (before the frame clips it,
    so that a test of overlap never misses one); the score also as its text and origin."""

    box: Pixels
    five: Pixels
    score: Pixels
    below: Pixels  # its 68 points (none without them), drawn first, under every other mark
    bounds: dict[str, Bounds]
    text: str
    origin: tuple[int, int]

    def region(self, height: int, width: int) -> tuple[int, int, int, int] | None:
        """The rectangle of the frame around every pixel drawn (x1, y1, x2, y2, exclusive), or ``None``."""
        every = list(self.bounds.values())
        x1, y1 = min(b[0] for b in every), min(b[1] for b in every)
        x2, y2 = max(b[2] for b in every), max(b[3] for b in every)
        x1, y1, x2, y2 = _clipped((x1, y1, x2, y2), height, width)
        return None if x2 < x1 or y2 < y1 else (x1, y1, x2 + 1, y2 + 1)


def _marks(face: Face, points: npt.NDArray[np.float32] | None, thickness: int, height: int, width: int) -> _Marks:
    text, origin = score_label(face, thickness)
    x1, y1, x2, y2 = corners = box_corners(face)
    reach = (thickness + 1) // 2 if thickness > 1 else 0  # the bands' and the round corners' reach alike
    bounds = {
        "box": (min(x1, x2) - reach, min(y1, y2) - reach, max(x1, x2) + reach, max(y1, y2) + reach),
        "score": _shifted(_glyph_bounds(text, thickness), *origin),
    }
    five, bounds["five"] = _stamped(_centres(face.landmarks), thickness + 1)
    below, bounds["below"] = _stamped(_centres(points), thickness) if points is not None else (_NONE, _EMPTY)
    score = glyphs(text, thickness) + np.array(origin, np.int64)
    return _Marks(
        box=_within(outline(corners, thickness), bounds["box"], height, width),
        five=_within(five, bounds["five"], height, width),
        score=_within(score, bounds["score"], height, width),
        below=_within(below, bounds["below"], height, width),
        bounds=bounds,
        text=text,
        origin=origin,
    )


def _meet(first: npt.NDArray[np.int64], second: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """``[F, F]``: whether the ``i``-th rectangle of ``first`` meets the ``j``-th of ``second`` (``[F, 4]``), for
    ``i`` before ``j`` only (a mark of a face with one of a later face)."""
    a, b = first[:, None, :], second[None, :, :]
    apart = (a[..., 2] < b[..., 0]) | (b[..., 2] < a[..., 0]) | (a[..., 3] < b[..., 1]) | (b[..., 3] < a[..., 1])
    return np.triu(~apart, k=1)


def _in_order(marks: Sequence[_Marks]) -> bool:
    """Whether a frame's marks must be drawn face by face, as the host draws them: where a face's five points or
    score lie under a later face's box, or its score under a later face's five points, drawing every box, then
    every five points, then every score would put the wrong one on top (a test on the marks' bounding rectangles:
    it never misses an overlap)."""
    if len(marks) < 2:
        return False
    five, box, score = (np.array([m.bounds[part] for m in marks], np.int64) for part in ("five", "box", "score"))
    return bool(_meet(five, box).any() or _meet(score, box).any() or _meet(score, five).any())


def _paint(pixels: list[Pixels], frame_of: list[int], hwc: torch.Tensor, colour: torch.Tensor) -> None:
    """Write ``colour`` at every pixel of ``pixels`` (one array per entry of ``frame_of``): one indexed write."""
    if not pixels:
        return
    counts = [len(p) for p in pixels]
    every = np.concatenate(pixels)
    frames = np.repeat(np.asarray(frame_of, np.int64), counts)
    index = torch.from_numpy(np.stack([frames, every[:, 1], every[:, 0]])).to(hwc.device)
    hwc[index[0], index[1], index[2]] = colour


def _write(hwc: torch.Tensor, index: int, marks: _Marks, thickness: int) -> None:
    """The score drawn by ``cv2.putText`` onto the patch of frame ``index`` under it, on the host, and the patch
    written back: OpenCV blends the glyphs' edges into the pixels under them."""
    x1, y1, x2, y2 = _clipped(marks.bounds["score"], *hwc.shape[1:3])
    if x2 < x1 or y2 < y1:
        return
    patch = np.ascontiguousarray(hwc[index, y1 : y2 + 1, x1 : x2 + 1].cpu().numpy())
    origin = (marks.origin[0] - x1, marks.origin[1] - y1)
    cv2.putText(patch, marks.text, origin, FONT, font_scale(thickness), BOX_COLOUR, thickness)
    hwc[index, y1 : y2 + 1, x1 : x2 + 1] = torch.from_numpy(patch).to(hwc.device)


def draw_marks(
    frames: DeviceFrames, faces: Sequence[Sequence[Face]], points_68: Sequence[Sequence[npt.NDArray[np.float32]]]
) -> None:
    """Draw each frame's faces (box, five points, score) and, where given, their 68 points (one ``[68, 2]`` array
    per face, in the order of the faces) into ``frames``, and store each face's touched region back into the
    planes: what :func:`~workers.processors.face_debugger.draw_faces` draws, on the device."""
    height, width = frames.height, frames.width
    thickness = mark_thickness(height, width)
    hwc = frames.bgr.permute(0, 2, 3, 1)  # the frames' own memory, one pixel's three channels together
    device = hwc.device
    red, green, cyan = (
        torch.tensor(colour, dtype=torch.uint8, device=device)
        for colour in (BOX_COLOUR, LANDMARK_COLOUR, LANDMARK_68_COLOUR)
    )
    per_frame: list[list[_Marks]] = []
    for index, detected in enumerate(faces):
        points = points_68[index] if index < len(points_68) else []
        per_frame.append(
            [
                _marks(face, points[number] if number < len(points) else None, thickness, height, width)
                for number, face in enumerate(detected)
            ]
        )
    ordered = [_in_order(marked) for marked in per_frame]
    flat = [(index, marks) for index, marked in enumerate(per_frame) for marks in marked]
    frame_of = [index for index, _ in flat]
    _paint([m.below for _, m in flat], frame_of, hwc, cyan)
    _paint([m.box for _, m in flat], frame_of, hwc, red)
    _paint([m.five for _, m in flat], frame_of, hwc, green)
    for index, marked in enumerate(per_frame):
        for marks in marked:
            if ordered[index]:  # as the host draws them: face after face, each over the ones before
                _paint([marks.box], [index], hwc, red)
                _paint([marks.five], [index], hwc, green)
            _write(hwc, index, marks, thickness)
        for marks in marked:
            region = marks.region(height, width)
            if region is not None:
                frames.store(index, region)
