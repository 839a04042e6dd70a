"""Which detection belongs to which face track: greedy one-to-one matching of a frame's boxes to the tracks' predicted
boxes — by overlap (:func:`match_overlapping`, what every tracked job does) and by distance
(:func:`match_nearby`, what an anonymiser adds for small fast faces; :func:`bridge_to` for one found on alternate
frames only) — and whether a track's box is leaving the
frame (:func:`leaving_frame`). Pure numpy; used by :mod:`workers.faces.tracking`.

Both are greedy, best pair first, ties broken by detection then track order, so the same boxes always give the
same pairs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["MATCH_IOU", "MATCH_WIDEN", "box_iou", "bridge_to", "leaving_frame", "match_nearby", "match_overlapping"]

FloatArray = npt.NDArray[np.float32]
Pairs = list[tuple[int, int]]

MATCH_IOU = 0.2
"""Least IoU (of the boxes widened by :data:`MATCH_WIDEN`) between a track's predicted box and a detection."""

MATCH_WIDEN = 0.25
"""Each side of a box widened by this fraction of its size before matching, so a small fast face (little or no
overlap with its last box) still finds its track."""


def box_iou(a: FloatArray, b: FloatArray) -> FloatArray:
    """IoU of every box of ``a`` [N, 4] with every box of ``b`` [M, 4] (``x1, y1, x2, y2``): [N, M]."""
    a = np.asarray(a, np.float32).reshape(-1, 4)
    b = np.asarray(b, np.float32).reshape(-1, 4)
    x1 = np.maximum(a[:, None, 0], b[None, :, 0])
    y1 = np.maximum(a[:, None, 1], b[None, :, 1])
    x2 = np.minimum(a[:, None, 2], b[None, :, 2])
    y2 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x2 - x1, 0, None) * np.clip(y2 - y1, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.asarray(np.where(union > 0, inter / np.maximum(union, 1e-9), 0.0), np.float32)


def _centres(boxes: FloatArray) -> FloatArray:
    return np.asarray((boxes[:, :2] + boxes[:, 2:]) / 2, np.float32)


def _widen(boxes: FloatArray) -> FloatArray:
    size = boxes[:, 2:] - boxes[:, :2]
    return np.concatenate([boxes[:, :2] - size * MATCH_WIDEN, boxes[:, 2:] + size * MATCH_WIDEN], axis=1)


def match_overlapping(found: FloatArray, predicted: FloatArray) -> Pairs:
    """Pairs ``(detection, track)`` of ``found`` [N, 4] and ``predicted`` [M, 4] whose boxes, each widened by
    :data:`MATCH_WIDEN`, overlap by an IoU of at least :data:`MATCH_IOU`; highest IoU first."""
    iou = box_iou(_widen(found), _widen(predicted))
    return _greedy(-iou, -MATCH_IOU)


def match_nearby(found: FloatArray, predicted: FloatArray, reach: float) -> Pairs:
    """Pairs ``(detection, track)`` whose centres are within ``reach`` face sizes (the larger box's longer side)
    and whose sizes are within half to twice each other; nearest first."""
    found = np.asarray(found, np.float32)
    predicted = np.asarray(predicted, np.float32)
    found_side = np.maximum(found[:, 2:] - found[:, :2], 1.0).max(axis=1)
    track_side = np.maximum(predicted[:, 2:] - predicted[:, :2], 1.0).max(axis=1)
    distance = np.linalg.norm(_centres(found)[:, None] - _centres(predicted)[None], axis=2)
    sizes = distance / np.maximum(found_side[:, None], track_side[None])
    ratio = found_side[:, None] / track_side[None]
    sizes = np.where((ratio >= 0.5) & (ratio <= 2.0), sizes, np.inf)
    return _greedy(sizes, reach)


def bridge_to(new: FloatArray, old: FloatArray, apart: list[int], reach: float) -> list[int | None]:
    """For each box of ``new``, the nearest box of ``old`` (last seen ``apart`` frames before) of a size within half
    to twice its own whose centre is within ``reach`` face sizes (the smaller face's longer side) for each frame
    apart, or ``None``."""
    new_side = np.maximum(new[:, 2:] - new[:, :2], 1.0).max(axis=1)
    old_side = np.maximum(old[:, 2:] - old[:, :2], 1.0).max(axis=1)
    distance = np.linalg.norm(_centres(new)[:, None] - _centres(old)[None], axis=2)
    ratio = old_side[None] / new_side[:, None]
    within = distance <= reach * np.minimum(new_side[:, None], old_side[None]) * np.asarray(apart, np.float32)[None]
    cost = np.where(within & (ratio >= 0.5) & (ratio <= 2.0), distance, np.inf)
    return [int(np.argmin(row)) if np.isfinite(row.min()) else None for row in cost]


def _greedy(cost: npt.NDArray[np.floating], limit: float) -> Pairs:
    """One-to-one pairs of rows and columns of ``cost``, cheapest first, none costing more than ``limit``."""
    pairs: Pairs = []
    used_rows: set[int] = set()
    used_columns: set[int] = set()
    for flat in np.argsort(cost, axis=None, kind="stable"):
        row, column = divmod(int(flat), cost.shape[1])
        if cost[row, column] > limit:
            break
        if row in used_rows or column in used_columns:
            continue
        used_rows.add(row)
        used_columns.add(column)
        pairs.append((row, column))
    return pairs


def leaving_frame(box: FloatArray, moved: FloatArray, frame: tuple[int, int]) -> bool:
    """Whether a face whose last box is ``box`` (``x1, y1, x2, y2``), each side having moved by ``moved`` over its
    last detections, is leaving a ``frame`` (width, height) across an edge its box reaches (within a tenth of its
    height): the box's side at that edge moves out across it, or its opposite side moves towards it by more than a
    twentieth of the box (the part of the face still in the frame shrinking: the detector boxes only that part, and
    a face that recedes as it leaves can even move its outer side in). A box standing at the edge jitters less.

    Example::

        leaving_frame(np.array([200, 300, 260, 360]), np.array([0, 8, 0, -1]), (640, 360)) is True
    """
    x1, y1, x2, y2 = (float(v) for v in box)
    d = [float(v) for v in moved]
    near, step = (y2 - y1) / 10, (y2 - y1) / 20
    width, height = frame
    return (
        (x1 <= near and (d[0] < 0 or d[2] < -step))
        or (y1 <= near and (d[1] < 0 or d[3] < -step))
        or (x2 >= width - near and (d[2] > 0 or d[0] > step))
        or (y2 >= height - near and (d[3] > 0 or d[1] > step))
    )
