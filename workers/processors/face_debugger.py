"""``face_debugger``: draws what the detector sees, each face's box, five landmarks and score, for checking
detector settings on a job's own footage. Every detected face is drawn; the selector mode is not applied.

With a 68-point landmarker configured (``face.landmarker_score`` > 0, as the swapper's alignment and the ``area``
mask use it) each face's 68 points from 2dfan4 are drawn too, in their own colour, and the five points drawn are
the ones the face is aligned by: derived from the 68 where their landmark score passes ``landmarker_score``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from workers.faces.detection import Face, FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.faces.targeting import FaceTargeter
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work, register

logger = logging.getLogger(__name__)

Frame = npt.NDArray[np.uint8]

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
    thickness = mark_thickness(*frame.shape[:2])
    for points in points_68 or []:
        for x, y in points:
            cv2.circle(output, (int(round(float(x))), int(round(float(y)))), thickness, LANDMARK_68_COLOUR, -1)
    for face in faces:
        x1, y1, x2, y2 = box_corners(face)
        cv2.rectangle(output, (x1, y1), (x2, y2), BOX_COLOUR, thickness)
        for x, y in face.landmarks:
            cv2.circle(output, (int(round(float(x))), int(round(float(y)))), thickness + 1, LANDMARK_COLOUR, -1)
        text, origin = score_label(face, thickness)
        cv2.putText(output, text, origin, FONT, font_scale(thickness), BOX_COLOUR, thickness)
    return output


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
        return self._apply(Work(frames, self.detector.detect(frames))).frames

    def stages(self) -> tuple[Stage, ...]:
        """One stage after the chain's detection: every detected face."""
        return (self._apply,)

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

    def _apply(self, work: Work) -> Work:
        located = self.locate(work)
        output = np.empty_like(work.frames)
        for index, (frame, faces) in enumerate(zip(work.frames, located.faces, strict=True)):
            output[index] = draw_faces(frame, faces, located.points[index]) if faces else frame
        work.frames = output
        return work


@register("face_debugger")
def _build(context: ProcessorContext) -> FaceDebuggerProcessor:
    return FaceDebuggerProcessor.from_context(context)
