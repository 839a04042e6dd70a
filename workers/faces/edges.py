"""Faces cut by the frame's edge: the frame's four edges mirrored outward, enlarged, for strict mode's sweep.

A face most of which is outside the frame — a 35-px face at the bottom of a 720p frame with its upper half showing
— is found by no view of the frame itself: the detector needs a face's outline, and what the frame holds is half of
one against the picture's edge (YuNet and SCRFD found that face at no enlargement of the frame's bottom strip).
Mirrored across the frame's edge, the half that shows becomes a whole face again, and the detectors find it
(:data:`~shared.strict_blur.EDGE_FACE`). Each edge's strip, :data:`~shared.strict_blur.EDGE_DEPTH` times the
smallest face deep, beside its mirror image and enlarged, is cut into pieces that overlap by a strip's width and
packed as the rows (top and bottom) or the columns (left and right) of canvases the size of the detector's input.

Only a face whose box straddles the edge's line (its centre within a quarter of its size of it) is a face of the edge:
a face wholly inside the strip is seen by the other passes, and its mirror image lies outside the frame. Boxes are
in the frame's coordinates and reach past its edge as the face does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from workers.faces.detection import Face, FaceDetector

__all__ = ["EdgeCanvas", "edge_canvases", "edge_faces"]

Frame = npt.NDArray[np.uint8]
Edge = Literal["top", "bottom", "left", "right"]

_STRADDLE = 0.25  # a box's centre within this share of its size of the edge's line straddles it
_LARGEST = 0.75  # of a row's height (a column's width): a box as large as the strip picture is the strip's false alarm


@dataclass(frozen=True)
class _Piece:
    edge: Edge
    origin: tuple[float, float]  # the piece's top-left corner in the frame's coordinates (past the edge: outside)
    picture: Frame  # enlarged by the canvas's zoom


@dataclass(frozen=True)
class EdgeCanvas:
    """One detector run's picture: pieces of mirrored edge strips, as rows (top, bottom) or columns (left, right)."""

    pieces: tuple[_Piece, ...]
    across: int  # a row's height or a column's width, px of the canvas
    rows: bool
    zoom: float  # canvas px per frame px
    size: int

    def picture(self) -> Frame:
        canvas = np.zeros((self.size, self.size, 3), np.uint8)
        for k, piece in enumerate(self.pieces):
            h, w = piece.picture.shape[:2]
            if self.rows:
                canvas[k * self.across : k * self.across + h, :w] = piece.picture
            else:
                canvas[:h, k * self.across : k * self.across + w] = piece.picture
        return canvas

    def faces(self, boxes: npt.NDArray[np.float32], points: npt.NDArray[np.float32], scores: npt.NDArray[np.float32],
              frame_shape: tuple[int, ...]) -> list[Face]:  # fmt: skip
        """The detections of this canvas that are faces of an edge, in the frame's coordinates."""
        found: list[Face] = []
        for box, landmarks, score in zip(boxes, points, scores, strict=True):
            centre = (box[:2] + box[2:]) / 2
            k = int(centre[1] // self.across) if self.rows else int(centre[0] // self.across)
            extent = float(box[3] - box[1]) if self.rows else float(box[2] - box[0])
            if k >= len(self.pieces) or extent > _LARGEST * self.across:
                continue
            piece = self.pieces[k]
            shift = np.asarray([0.0, k * self.across] if self.rows else [k * self.across, 0.0], np.float32)
            origin = np.asarray(piece.origin, np.float32)
            in_frame = np.concatenate([(box[:2] - shift) / self.zoom + origin, (box[2:] - shift) / self.zoom + origin])
            face = Face(
                box=in_frame.astype(np.float32),
                landmarks=((landmarks - shift) / self.zoom + origin).astype(np.float32),
                score=float(score),
            )
            if _straddles(face.box, piece.edge, frame_shape):
                found.append(face)
        return found


def _straddles(box: npt.NDArray[np.float32], edge: Edge, shape: tuple[int, ...]) -> bool:
    height, width = shape[:2]
    vertical = edge in ("top", "bottom")
    low, high = (box[1], box[3]) if vertical else (box[0], box[2])
    line = {"top": 0, "left": 0, "bottom": height, "right": width}[edge]
    return bool(abs((low + high) / 2 - line) <= _STRADDLE * (high - low))


def _strips(frame: Frame, depth: int) -> Iterator[tuple[Edge, Frame, tuple[float, float]]]:
    """Each edge's strip beside its mirror image, and the strip picture's top-left corner in the frame."""
    height, width = frame.shape[:2]
    depth = min(depth, height, width)
    top, bottom = frame[:depth], frame[height - depth :]
    left, right = frame[:, :depth], frame[:, width - depth :]
    yield "top", np.vstack([top[::-1], top]), (0.0, -depth)
    yield "bottom", np.vstack([bottom, bottom[::-1]]), (0.0, float(height - depth))
    yield "left", np.hstack([left[:, ::-1], left]), (-depth, 0.0)
    yield "right", np.hstack([right, right[:, ::-1]]), (float(width - depth), 0.0)


def _starts(extent: int, piece: int, overlap: int) -> list[int]:
    if extent <= piece:
        return [0]
    step = max(1, piece - overlap)
    return sorted({*range(0, extent - piece, step), extent - piece})


def edge_canvases(frame: Frame, depth: int, zoom: float, size: int) -> list[EdgeCanvas]:
    """The canvases (``size`` px square) that show every edge's strip of ``frame``, ``depth`` px deep, beside its
    mirror image, enlarged ``zoom`` times; pieces along an edge overlap by the strip picture's width, so a face cut
    where one piece ends is whole in the next."""
    across = max(1, round(2 * depth * zoom))
    if across > size:
        return []
    per_canvas = size // across
    rows: list[_Piece] = []
    columns: list[_Piece] = []
    for edge, strip, (x0, y0) in _strips(frame, depth):
        long_side = strip.shape[1] if edge in ("top", "bottom") else strip.shape[0]
        enlarged_long = round(long_side * zoom)
        enlarged = np.asarray(
            cv2.resize(
                strip,
                (enlarged_long, across) if edge in ("top", "bottom") else (across, enlarged_long),
                interpolation=cv2.INTER_CUBIC,
            ),
            np.uint8,
        )
        for start in _starts(enlarged_long, size, across):
            if edge in ("top", "bottom"):
                rows.append(_Piece(edge, (x0 + start / zoom, y0), enlarged[:, start : start + size]))
            else:
                columns.append(_Piece(edge, (x0, y0 + start / zoom), enlarged[start : start + size]))
    canvases = []
    for pieces, as_rows in ((rows, True), (columns, False)):
        for first in range(0, len(pieces), per_canvas):
            canvases.append(EdgeCanvas(tuple(pieces[first : first + per_canvas]), across, as_rows, zoom, size))
    return canvases


def edge_faces(
    detector: FaceDetector, canvas: EdgeCanvas, frame_shape: tuple[int, ...], threshold: float
) -> list[Face]:
    """The faces of the frame's edges one canvas shows (one model run)."""
    detections = detector.run_picture(canvas.picture(), threshold)
    return canvas.faces(detections.boxes, detections.landmarks, detections.scores, frame_shape)
