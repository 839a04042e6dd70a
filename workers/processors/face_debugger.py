"""``face_debugger``: draws what the detector sees, each face's box, five landmarks and score, for checking
detector settings on a job's own footage. Every detected face is drawn; the selector mode is not applied.

With a 68-point landmarker configured (``face.landmarker_score`` > 0, as the swapper's alignment and the ``area``
mask use it) each face's 68 points from 2dfan4 are drawn too, in their own colour, and the five points drawn are
the ones the face is aligned by: derived from the 68 where their landmark score passes ``landmarker_score``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import cv2
import numpy as np
import numpy.typing as npt

from workers.faces.detection import Face, FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.faces.targeting import FaceTargeter
from workers.frames.backend import Box, FrameBackend
from workers.frames.batch import Frames
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work, register

logger = logging.getLogger(__name__)

Frame = npt.NDArray[np.uint8]
Points = npt.NDArray[np.float32]
A = TypeVar("A")

BOX_COLOUR = (0, 0, 255)  # BGR red
LANDMARK_COLOUR = (0, 255, 0)  # BGR green
LANDMARK_68_COLOUR = (255, 255, 0)  # BGR cyan
FONT = cv2.FONT_HERSHEY_SIMPLEX


def mark_thickness(height: int, width: int) -> int:
    """The lines' thickness (and the 68 points' radius; the five points' is one more) for a frame's size."""
    return max(1, round(max(height, width) / 500))


def font_scale(thickness: int) -> float:
    """The score's font scale for a mark thickness."""
    return 0.4 * thickness


def box_corners(face: Face) -> tuple[int, int, int, int]:
    """The face's box as drawn: ``x1, y1, x2, y2`` rounded to whole pixels."""
    x1, y1, x2, y2 = (int(round(float(value))) for value in face.box)
    return x1, y1, x2, y2


def score_label(face: Face, thickness: int) -> tuple[str, tuple[int, int]]:
    """The face's score as drawn above its box: the text, and its bottom-left origin."""
    x1, y1, _, _ = box_corners(face)
    return f"{face.score:.2f}", (x1, max(y1 - 4 * thickness, 10))


def draw_faces(frame: Frame, faces: list[Face], points_68: list[npt.NDArray[np.float32]] | None = None) -> Frame:
    """A copy of ``frame`` with each face's box, landmarks and score drawn on it; with ``points_68`` (one [68, 2]
    array per face), those points first, under the rest."""
    output = np.ascontiguousarray(frame.copy())
    _draw(output, faces, points_68 or [], mark_thickness(*frame.shape[:2]), (0, 0))
    return output


def _draw(
    canvas: Frame,
    faces: Sequence[Face],
    points_68: Sequence[npt.NDArray[np.float32]],
    thickness: int,
    origin: tuple[int, int],
) -> None:
    """Draw the marks into ``canvas``, the frame's region whose top-left pixel is ``origin``, in place."""
    ox, oy = origin

    def at(x: float, y: float) -> tuple[int, int]:
        return int(round(float(x))) - ox, int(round(float(y))) - oy

    for points in points_68:
        for x, y in points:
            cv2.circle(canvas, at(x, y), thickness, LANDMARK_68_COLOUR, -1)
    for face in faces:
        x1, y1, x2, y2 = box_corners(face)
        cv2.rectangle(canvas, (x1 - ox, y1 - oy), (x2 - ox, y2 - oy), BOX_COLOUR, thickness)
        for x, y in face.landmarks:
            cv2.circle(canvas, at(x, y), thickness + 1, LANDMARK_COLOUR, -1)
        text, (tx, ty) = score_label(face, thickness)
        cv2.putText(canvas, text, (tx - ox, ty - oy), FONT, font_scale(thickness), BOX_COLOUR, thickness)


def marked_region(
    faces: Sequence[Face], points_68: Sequence[npt.NDArray[np.float32]], thickness: int, height: int, width: int
) -> Box:
    """The frame's pixels the marks of ``faces`` can touch: ``x1, y1, x2, y2``, clipped to the frame."""
    xs: list[float] = []
    ys: list[float] = []
    for face in faces:
        x1, y1, x2, y2 = box_corners(face)
        text, (tx, ty) = score_label(face, thickness)
        (tw, th), base = cv2.getTextSize(text, FONT, font_scale(thickness), thickness)
        xs += [x1, x2, tx, tx + tw, *face.landmarks[:, 0].tolist()]
        ys += [y1, y2, ty - th, ty + base, *face.landmarks[:, 1].tolist()]
    for points in points_68:
        xs += points[:, 0].tolist()
        ys += points[:, 1].tolist()
    pad = 2 * thickness + 4  # a line's half width, a disc's radius, rounding
    return (
        max(0, int(np.floor(min(xs))) - pad),
        max(0, int(np.floor(min(ys))) - pad),
        min(width, int(np.ceil(max(xs))) + pad + 1),
        min(height, int(np.ceil(max(ys))) + pad + 1),
    )


@dataclass
class Located:
    """What the debugger draws on a batch: each frame's faces, and each face's 68 points (none without a
    68-point landmarker)."""

    faces: list[list[Face]]
    points: list[list[npt.NDArray[np.float32]]]


class FaceDebuggerProcessor:
    """Draws every detected face of each frame, and its 68 points where a ``landmarker`` is given."""

    targeter: FaceTargeter | None = None  # every detected face, whatever the selector mode

    touches_pixels = True

    def __init__(
        self, detector: FaceDetector, landmarker: FaceLandmarker | None = None, reporter: Reporter | None = None
    ) -> None:
        self.detector = detector
        self.landmarker = landmarker
        self._reporter = reporter

    @classmethod
    def from_context(cls, context: ProcessorContext, *, detector: FaceDetector | None = None) -> FaceDebuggerProcessor:
        """Build from a job's context, loading the detector (if not given) and, when ``face.landmarker_score`` is
        above 0, the 68-point landmarker through the model registry."""
        face = context.options.face
        detector = detector or FaceDetector.load(face, context.settings)
        if face.landmarker_score <= 0:
            return cls(detector)
        landmarker = FaceLandmarker.load(context.settings, min_score=face.landmarker_score)
        return cls(detector, landmarker, Reporter(context.report, landmarker.degradations))

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with the detections drawn on."""
        work = Work(frames, self.detector.detect(frames))
        for stage in self.stages():
            work = stage(work)
        return work.frames

    def stages(self) -> tuple[Stage, ...]:
        """After the chain's detection: every detected face located (its 68 points, with a landmarker), then the
        marks drawn on the batch's frame back-end."""
        return self._locate, self._draw

    def locate(self, work: Work) -> Located:
        """The batch's faces to draw (every detected face) and, with a landmarker, their 68 points: found for
        every face of the batch in one call, which also aligns the five points drawn by them."""
        assert work.faces is not None
        faces_per_frame: list[list[Face]] = list(work.faces)
        points: list[list[npt.NDArray[np.float32]]] = [[] for _ in faces_per_frame]
        if self.landmarker is not None and any(faces_per_frame):
            found = self.landmarker.landmarks(work.frames, faces_per_frame)
            faces_per_frame, start = found.faces, 0
            for index, faces in enumerate(faces_per_frame):
                points[index], start = found.points[start : start + len(faces)], start + len(faces)
            if self._reporter is not None:
                self._reporter.check()
        return Located(faces_per_frame, points)

    def draw(self, backend: FrameBackend[A], frames: Frames[A], located: Located) -> None:
        """Draw ``located`` into ``frames`` on ``backend``, in place, in ``draw_faces``' order (every face's 68
        points, then each face's box, points and score), each mark set in its own region, drawn on the host
        (marks are few, their pixels fewer): only those regions are rewritten."""
        thickness = mark_thickness(frames.height, frames.width)
        height, width = frames.height, frames.width
        for index, faces in enumerate(located.faces):
            sets: list[tuple[list[Face], list[Points]]] = [([], [points]) for points in located.points[index]]
            sets += [([face], []) for face in faces]
            for marked, points in sets:
                box = marked_region(marked, points, thickness, height, width)

                def draw(
                    region: Frame, marked: list[Face] = marked, points: list[Points] = points, box: Box = box
                ) -> None:
                    _draw(region, marked, points, thickness, (box[0], box[1]))

                backend.draw(frames, index, box, draw)

    def _locate(self, work: Work) -> Work:
        work.state = self.locate(work)
        return work

    def _draw(self, work: Work) -> Work:
        located = work.state
        assert isinstance(located, Located)
        backend, frames = work.on_backend()
        self.draw(backend, frames, located)
        work.state = None
        return work


@register("face_debugger")
def _build(context: ProcessorContext) -> FaceDebuggerProcessor:
    return FaceDebuggerProcessor.from_context(context)
