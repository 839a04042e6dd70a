"""Close looks: boxes where a face may be, each looked at enlarged and turned in a cell of a mosaic the size of the
detector's input, so one model run looks at several (an anonymiser's checks around the tracks' expected boxes and
at what its passes only doubt, :mod:`workers.faces.sweep`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from shared.strict_blur import AROUND_CELL, AROUND_FACE, AROUND_MOST, CONFIRM_IOU, DOUBTS_MOST
from workers.faces.association import box_iou
from workers.faces.detection import Face, FaceDetector

__all__ = ["confirmed", "doubts_to_look_at", "look_around", "mapped", "overlaps"]

Frame = npt.NDArray[np.uint8]

_EDGE = 2.0  # px: a box this close to a mosaic cell's edge is cut by it


def look_around(
    detector: FaceDetector,
    turns: Sequence[float],
    frame: Frame,
    boxes: Sequence[npt.NDArray[np.float32]],
    threshold: float,
) -> list[Face]:
    """The faces found close around ``boxes``: each box's neighbourhood, enlarged (or shrunk) so its face is
    :data:`~shared.strict_blur.AROUND_FACE` px and turned 0 and each of ``turns`` degrees, is one cell of a mosaic
    the size of the model's input, so one model run looks at several boxes (a 640-px input holds 16 cells of
    160 px: five boxes, three turns each)."""
    if not boxes:
        return []
    size = detector.size
    per_row = max(1, size // AROUND_CELL)
    per_canvas = per_row * per_row
    cells: list[tuple[npt.NDArray[Any], Frame]] = []
    for box in boxes[:AROUND_MOST]:
        side = float(max(box[2] - box[0], box[3] - box[1]))
        if not np.isfinite(side) or side < 4.0:
            continue
        centre = ((box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0)
        zoom = AROUND_FACE / side
        for angle in (0.0, *turns):
            matrix = cv2.getRotationMatrix2D((float(centre[0]), float(centre[1])), angle, zoom)
            matrix[0, 2] += AROUND_CELL / 2 - centre[0]
            matrix[1, 2] += AROUND_CELL / 2 - centre[1]
            cell = np.asarray(cv2.warpAffine(frame, matrix, (AROUND_CELL, AROUND_CELL)), np.uint8)
            cells.append((matrix, cell))
    found: list[Face] = []
    for first in range(0, len(cells), per_canvas):
        group = cells[first : first + per_canvas]
        canvas = np.zeros((size, size, 3), np.uint8)
        for k, (_, cell) in enumerate(group):
            y, x = divmod(k, per_row)
            canvas[y * AROUND_CELL : (y + 1) * AROUND_CELL, x * AROUND_CELL : (x + 1) * AROUND_CELL] = cell
        detections = detector.run_picture(canvas, threshold)
        for box, points, score in zip(detections.boxes, detections.landmarks, detections.scores, strict=True):
            centre = (box[:2] + box[2:]) / 2
            y, x = (int(v) for v in centre[::-1] // AROUND_CELL)
            k = y * per_row + x
            origin = np.asarray([x, y], np.float32) * AROUND_CELL
            inner = np.concatenate([box[:2] - origin, box[2:] - origin])
            if k >= len(group) or inner.min() < _EDGE or inner.max() > AROUND_CELL - _EDGE:
                continue  # outside the cells, or cut by a cell's edge: not a whole face of this cell
            matrix = group[k][0]
            face = Face(
                box=inner.astype(np.float32),
                landmarks=(points - origin).astype(np.float32),
                score=float(score),
            )
            found.append(mapped(face, cv2.invertAffineTransform(matrix)))
    return found


def doubts_to_look_at(
    doubts: Sequence[Face], taken: Sequence[npt.NDArray[np.float32]]
) -> list[npt.NDArray[np.float32]]:
    """The boxes of ``doubts`` (a scan's faces scored under the track score) that overlap none of the boxes ``taken``
    (the tracks' expected boxes, the faces found), the highest scored first, at most
    :data:`~shared.strict_blur.DOUBTS_MOST`: each is looked at closely like a track's box."""
    boxes: list[npt.NDArray[np.float32]] = []
    for face in sorted(doubts, key=lambda doubt: -doubt.score):
        if len(boxes) == DOUBTS_MOST:
            break
        if not overlaps(face.box, taken):
            boxes.append(face.box)
    return boxes


def overlaps(box: npt.NDArray[np.float32], boxes: Sequence[npt.NDArray[np.float32]]) -> bool:
    """Whether ``box`` overlaps any of ``boxes`` at all."""
    return bool(len(boxes)) and float(box_iou(box[None], np.stack(boxes).astype(np.float32)).max()) > 0.0


def confirmed(faces: Sequence[Face], looks: Sequence[Face]) -> list[bool]:
    """For each of ``faces``, whether one of the close looks' faces ``looks`` overlaps it by
    :data:`~shared.strict_blur.CONFIRM_IOU` or more."""
    if not looks:
        return [False] * len(faces)
    seen = np.stack([look.box for look in looks]).astype(np.float32)
    return [float(box_iou(face.box[None], seen).max()) >= CONFIRM_IOU for face in faces]


def mapped(face: Face, back: npt.NDArray[Any]) -> Face:
    """A face found in a warped picture, in the frame: its landmarks mapped back exactly, and an upright box of the
    same shape (scaled as the warp scaled it) around its centre mapped back."""
    centre = (face.box[:2] + face.box[2:]) / 2
    size = (face.box[2:] - face.box[:2]) * float(np.sqrt(abs(np.linalg.det(back[:, :2]))))
    centre_back = back[:, :2] @ centre + back[:, 2]
    points = face.landmarks @ back[:, :2].T + back[:, 2]
    box = np.concatenate([centre_back - size / 2, centre_back + size / 2]).astype(np.float32)
    return Face(box=box, landmarks=points.astype(np.float32), score=face.score)
