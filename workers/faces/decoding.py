"""The decoders of the detector families' outputs: scores, boxes and five landmarks per face, after NMS.

Outputs are matched to their meaning by name (``cls_8``, ``score_16``, ``bbox_32``, ``kps_8`` …) where the
model names them so, and otherwise by shape (the last axis says scores/boxes/landmarks, the row count says the
stride); anything that stays ambiguous is an error, never a guess. Each decoder keeps the candidates at or above
its score threshold and runs ``cv2.dnn.NMSBoxes`` at IoU 0.4 (:data:`NMS_THRESHOLD`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import ModelError
from workers.engines.base import Tensor

FloatArray = npt.NDArray[np.float32]
Size = int | tuple[int, int]
"""A detector input's size: its side where it is square, else ``(height, width)``."""

NMS_THRESHOLD = 0.4
STRIDES: tuple[int, ...] = (8, 16, 32)


class Detections(NamedTuple):
    """Decoded detections of one image, in the coordinates of the detector's input, after NMS."""

    boxes: FloatArray  # [K, 4] x1, y1, x2, y2
    scores: FloatArray  # [K]
    landmarks: FloatArray  # [K, 5, 2]


_NAMED_OUTPUT = re.compile(r"^(?P<kind>cls|obj|score|bbox|kps)_(?P<stride>\d+)$")
_KIND_BY_WIDTH = {1: "score", 4: "bbox", 10: "kps"}


def _rows(tensor: Tensor, name: str) -> FloatArray:
    """A [1, N, k] or [N, k] output as float32 [N, k]."""
    array = np.asarray(tensor, dtype=np.float32)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise ModelError(f"detector output {name!r} has shape {array.shape}; expected [N, k] or [1, N, k]")
    return array


def named_by_stride(outputs: Iterable[str]) -> bool:
    """Whether every output's name says its kind and stride (``score_8``, ``bbox_16`` …)."""
    return all(_NAMED_OUTPUT.match(name) for name in outputs)


def _sides(size: Size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else size


def place_output(
    name: str, rows: int, width: int, *, by_name: bool, size: Size, anchors: int, kinds: Sequence[str]
) -> tuple[str, int]:
    """The ``(kind, stride)`` of a per-stride detector output of ``rows`` rows of ``width`` values per image: read
    from its name where every output is named so (``score_8``, ``bbox_16`` …), else from its shape.

    Raises:
        ModelError: the output's shape fits no kind and stride.
    """
    if by_name:
        match = _NAMED_OUTPUT.match(name)
        assert match is not None
        kind, stride = match["kind"], int(match["stride"])
        return ("score" if kind == "cls" and "cls" not in kinds else kind), stride
    kind_or_none = _KIND_BY_WIDTH.get(width)
    height, across = _sides(size)
    strides = [s for s in STRIDES if (height // s) * (across // s) * anchors == rows]
    if kind_or_none is None or len(strides) != 1:
        raise ModelError(f"cannot place detector output {name!r} of {rows} rows of {width}")
    return kind_or_none, strides[0]


def _grid_outputs(
    outputs: Mapping[str, Tensor], size: Size, anchors: int, kinds: Sequence[str]
) -> dict[tuple[str, int], FloatArray]:
    """Key per-stride outputs by ``(kind, stride)``: by name where names say it, otherwise by shape.

    Raises:
        ModelError: an expected output is missing, or two outputs cannot be told apart.
    """
    arranged: dict[tuple[str, int], FloatArray] = {}
    by_name = named_by_stride(outputs)
    for name, tensor in outputs.items():
        rows = _rows(tensor, name)
        kind, stride = place_output(
            name, rows.shape[0], rows.shape[1], by_name=by_name, size=size, anchors=anchors, kinds=kinds
        )
        key = (kind, stride)
        if key in arranged:
            raise ModelError(f"two detector outputs map to {kind} at stride {stride}; name them")
        arranged[key] = rows
    for stride in STRIDES:
        for kind in kinds:
            if (kind, stride) not in arranged:
                raise ModelError(f"detector outputs lack {kind} at stride {stride}: got {sorted(outputs)}")
            expected = (_sides(size)[0] // stride) * (_sides(size)[1] // stride) * anchors
            if arranged[(kind, stride)].shape[0] != expected:
                raise ModelError(
                    f"detector output {kind}_{stride} has {arranged[(kind, stride)].shape[0]} rows, "
                    f"expected {expected} for input size {size}"
                )
    return arranged


def _anchor_centres(size: Size, stride: int, anchors: int, rows: npt.NDArray[np.intp]) -> FloatArray:
    """The cell origins ``(x, y)·stride`` of output ``rows``, whose cells run row-major with x fastest, each
    repeated ``anchors`` times: worked out for those rows only, not the whole grid (a 640-px input has 8,400 cells
    a stride-8 output; a frame's kept rows are a handful)."""
    columns = _sides(size)[1] // stride
    cells = rows // anchors
    return np.stack((cells % columns, cells // columns), axis=-1).astype(np.float32) * stride


def _empty() -> Detections:
    return Detections(np.zeros((0, 4), np.float32), np.zeros((0,), np.float32), np.zeros((0, 5, 2), np.float32))


def suppress_detections(boxes: FloatArray, scores: FloatArray, landmarks: FloatArray, threshold: float) -> Detections:
    """Non-maximum suppression at IoU :data:`NMS_THRESHOLD`; survivors in descending score order."""
    if len(scores) == 0:
        return _empty()
    xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    kept = cv2.dnn.NMSBoxes(xywh.tolist(), scores.tolist(), threshold, NMS_THRESHOLD)
    keep = np.asarray(kept, dtype=np.int64).reshape(-1)
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    return Detections(boxes[keep], scores[keep], landmarks[keep])


def decode_yunet(outputs: Mapping[str, Tensor], size: Size, threshold: float) -> Detections:
    """Decode YuNet (OpenCV Zoo 2023mar): per stride ``cls``, ``obj`` [N,1], ``bbox`` [N,4], ``kps`` [N,10].

    One prior per cell; score = cls·obj (FaceFusion's rule); centre = d[:2]·s + cell; size = exp(d[2:4])·s;
    landmarks = d·s + cell.
    """
    grid = _grid_outputs(outputs, size, 1, ("cls", "obj", "bbox", "kps"))
    boxes, scores, landmarks = [], [], []
    for stride in STRIDES:
        score = (grid[("cls", stride)] * grid[("obj", stride)]).reshape(-1)
        keep = np.flatnonzero(score >= threshold)
        if keep.size == 0:
            continue
        cells = _anchor_centres(size, stride, 1, keep)
        bbox = grid[("bbox", stride)][keep]
        centre = bbox[:, :2] * stride + cells
        half = np.exp(bbox[:, 2:4]) * stride / 2
        boxes.append(np.concatenate([centre - half, centre + half], axis=1))
        scores.append(score[keep])
        landmarks.append(grid[("kps", stride)][keep].reshape(-1, 5, 2) * stride + cells[:, None, :])
    if not scores:
        return _empty()
    return suppress_detections(np.concatenate(boxes), np.concatenate(scores), np.concatenate(landmarks), threshold)


def decode_scrfd(outputs: Mapping[str, Tensor], size: Size, threshold: float) -> Detections:
    """Decode the insightface SCRFD/RetinaFace layout: per stride ``score``, ``bbox``, ``kps`` [N, 1/4/10].

    Two anchors per cell; scores are already sigmoid-ed; box = cell ∓/± d·s (left, top, right, bottom);
    landmarks = cell + d·s. Outputs may be 2-D or carry a leading batch axis of 1.
    """
    grid = _grid_outputs(outputs, size, 2, ("score", "bbox", "kps"))
    boxes, scores, landmarks = [], [], []
    for stride in STRIDES:
        score = grid[("score", stride)].reshape(-1)
        keep = np.flatnonzero(score >= threshold)
        if keep.size == 0:
            continue
        cells = _anchor_centres(size, stride, 2, keep)
        distance = grid[("bbox", stride)][keep] * stride
        boxes.append(np.concatenate([cells - distance[:, :2], cells + distance[:, 2:]], axis=1))
        scores.append(score[keep])
        landmarks.append(grid[("kps", stride)][keep].reshape(-1, 5, 2) * stride + cells[:, None, :])
    if not scores:
        return _empty()
    return suppress_detections(np.concatenate(boxes), np.concatenate(scores), np.concatenate(landmarks), threshold)


def decode_yolo_face(outputs: Mapping[str, Tensor], size: Size, threshold: float) -> Detections:
    """Decode YOLOv8-face: one output [1, 20, N] of ``cx, cy, w, h, score`` and 5 × ``(x, y, visibility)``."""
    if len(outputs) != 1:
        raise ModelError(f"yolo_face has one output, got {sorted(outputs)}")
    (name, tensor), *_ = outputs.items()
    array = np.asarray(tensor, dtype=np.float32)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or array.shape[0] != 20:
        raise ModelError(f"yolo_face output {name!r} has shape {array.shape}; expected [1, 20, N]")
    rows = array.T
    keep = np.flatnonzero(rows[:, 4] > threshold)
    if keep.size == 0:
        return _empty()
    rows = rows[keep]
    centre, half = rows[:, :2], rows[:, 2:4] / 2
    boxes = np.concatenate([centre - half, centre + half], axis=1)
    landmarks = rows[:, 5:20].reshape(-1, 5, 3)[:, :, :2]
    return suppress_detections(boxes, np.ascontiguousarray(rows[:, 4]), np.ascontiguousarray(landmarks), threshold)


"""Every detector family, by the :data:`shared.options.Detector` name a job uses."""
