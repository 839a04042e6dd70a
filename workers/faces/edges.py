"""Faces cut by the frame's edge: the frame's four edges mirrored outward, enlarged, for strict mode's sweep.

A face most of which is outside the frame — a 35-px face at the bottom of a 720p frame with its upper half showing
— is found by no view of the frame itself: the detector needs a face's outline, and what the frame holds is half of
one against the picture's edge (YuNet and SCRFD found that face at no enlargement of the frame's bottom strip).
Mirrored across the frame's edge, the half that shows becomes a whole face again, and the detectors find it
(:data:`~shared.strict_blur.EDGE_FACE`). Each edge's strip, :data:`~shared.strict_blur.EDGE_DEPTH` times the
smallest face deep, beside its mirror image and enlarged, is cut into pieces that overlap by a strip's width and
packed as the rows (top and bottom) or the columns (left and right) of canvases the size of the detector's input;
for a detector that takes a picture of any size, the top and bottom strips are whole, the rows of one picture, and
the left and right ones the columns of another: two runs a frame where a 720p frame's canvases take six, in 1.5–1.7
times less time (no overlaps, no empty canvas; docs/anonymiser.md).

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
    start: int  # where it starts along its edge's enlarged strip picture, px
    length: int  # px along the edge


class _Strips:
    """A frame's four edge strips, each beside its mirror image, enlarged (once, where a canvas first shows it)."""

    def __init__(self, frame: Frame, depth: int, zoom: float, across: int) -> None:
        self.pictures = {edge: (strip, origin) for edge, strip, origin in _strips(frame, depth)}
        self.zoom, self.across = zoom, across
        self._enlarged: dict[Edge, Frame] = {}

    def long(self, edge: Edge) -> int:
        """The enlarged strip picture's length along its edge, px."""
        strip = self.pictures[edge][0]
        return int(round((strip.shape[1] if edge in ("top", "bottom") else strip.shape[0]) * self.zoom))

    def enlarged(self, edge: Edge) -> Frame:
        if edge not in self._enlarged:
            strip = self.pictures[edge][0]
            size = (self.long(edge), self.across) if edge in ("top", "bottom") else (self.across, self.long(edge))
            self._enlarged[edge] = np.asarray(cv2.resize(strip, size, interpolation=cv2.INTER_CUBIC), np.uint8)
        return self._enlarged[edge]


@dataclass(frozen=True, eq=False)
class EdgeCanvas:
    """One detector run's picture: pieces of mirrored edge strips, as rows (top, bottom) or columns (left, right)."""

    pieces: tuple[_Piece, ...]
    strips: _Strips
    rows: bool
    shape: tuple[int, int]  # the picture's height and width, px

    @property
    def across(self) -> int:
        """A row's height or a column's width, px of the canvas."""
        return self.strips.across

    @property
    def zoom(self) -> float:
        """Canvas px per frame px."""
        return self.strips.zoom

    def picture(self) -> Frame:
        canvas = np.zeros((*self.shape, 3), np.uint8)
        for k, piece in enumerate(self.pieces):
            enlarged = self.strips.enlarged(piece.edge)
            at = k * self.across
            if self.rows:
                part = enlarged[:, piece.start : piece.start + piece.length]
                canvas[at : at + part.shape[0], : part.shape[1]] = part
            else:
                part = enlarged[piece.start : piece.start + piece.length]
                canvas[: part.shape[0], at : at + part.shape[1]] = part
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


def edge_canvases(frame: Frame, depth: int, zoom: float, size: int, *, whole: bool = False) -> list[EdgeCanvas]:
    """The canvases that show every edge's strip of ``frame``, ``depth`` px deep, beside its mirror image, enlarged
    ``zoom`` times: ``size`` px square, pieces along an edge overlapping by the strip picture's width so a face cut
    where one piece ends is whole in the next; or, ``whole`` (a detector that takes a picture of any size), two
    pictures: the top and bottom strips whole as its rows, the left and right ones as its columns. A strip picture
    is enlarged only where a canvas's :meth:`~EdgeCanvas.picture` is asked for."""
    across = max(1, round(2 * depth * zoom))
    if across > size:
        return []
    strips = _Strips(frame, depth, zoom, across)
    rows: list[_Piece] = []
    columns: list[_Piece] = []
    for edge, (_, (x0, y0)) in strips.pictures.items():
        long = strips.long(edge)
        for start in [0] if whole else _starts(long, size, across):
            length = long if whole else min(size, long - start)
            if edge in ("top", "bottom"):
                rows.append(_Piece(edge, (x0 + start / zoom, y0), start, length))
            else:
                columns.append(_Piece(edge, (x0, y0 + start / zoom), start, length))
    canvases = []
    for pieces, as_rows in ((rows, True), (columns, False)):
        per_canvas = len(pieces) if whole else size // across
        for first in range(0, len(pieces), per_canvas):
            group = tuple(pieces[first : first + per_canvas])
            long = max(p.length for p in group) if whole else size
            shape = (len(group) * across, long) if as_rows else (long, len(group) * across)
            canvases.append(EdgeCanvas(group, strips, as_rows, shape if whole else (size, size)))
    return canvases


def edge_faces(
    detector: FaceDetector, canvas: EdgeCanvas, frame_shape: tuple[int, ...], threshold: float
) -> list[Face]:
    """The faces of the frame's edges one canvas shows (one model run, of any size where the canvas is larger than
    the detector's input)."""
    detections = detector.run_picture(canvas.picture(), threshold)
    return canvas.faces(detections.boxes, detections.landmarks, detections.scores, frame_shape)
