"""``face_debugger``: draws what the detector sees, each face's box, five landmarks and score, for checking
detector settings on a job's own footage. Every detected face is drawn; the selector mode is not applied.
"""

from __future__ import annotations

import logging

import cv2
import numpy as np
import numpy.typing as npt

from workers.faces.detection import Face, FaceDetector
from workers.faces.targeting import FaceTargeter
from workers.processors.base import FrameBatch, ProcessorContext, Stage, Work, register

logger = logging.getLogger(__name__)

Frame = npt.NDArray[np.uint8]

BOX_COLOUR = (0, 0, 255)  # BGR red
LANDMARK_COLOUR = (0, 255, 0)  # BGR green


def draw_faces(frame: Frame, faces: list[Face]) -> Frame:
    """A copy of ``frame`` with each face's box, landmarks and score drawn on it."""
    output = np.ascontiguousarray(frame.copy())
    thickness = max(1, round(max(frame.shape[:2]) / 500))
    for face in faces:
        x1, y1, x2, y2 = (int(round(float(value))) for value in face.box)
        cv2.rectangle(output, (x1, y1), (x2, y2), BOX_COLOUR, thickness)
        for x, y in face.landmarks:
            cv2.circle(output, (int(round(float(x))), int(round(float(y)))), thickness + 1, LANDMARK_COLOUR, -1)
        cv2.putText(
            output,
            f"{face.score:.2f}",
            (x1, max(y1 - 4 * thickness, 10)),
            cv2.FONT_HERSHEY_SIMPLEX,
            0.4 * thickness,
            BOX_COLOUR,
            thickness,
        )
    return output


class FaceDebuggerProcessor:
    """Draws every detected face of each frame."""

    targeter: FaceTargeter | None = None  # every detected face, whatever the selector mode

    touches_pixels = True

    def __init__(self, detector: FaceDetector) -> None:
        self.detector = detector

    @classmethod
    def from_context(cls, context: ProcessorContext, *, detector: FaceDetector | None = None) -> FaceDebuggerProcessor:
        """Build from a job's context, loading the detector through the model registry if not given."""
        return cls(detector or FaceDetector.load(context.options.face, context.settings))

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with the detections drawn on."""
        return self._apply(Work(frames, self.detector.detect(frames))).frames

    def stages(self) -> tuple[Stage, ...]:
        """One stage after the chain's detection: every detected face."""
        return (self._apply,)

    def _apply(self, work: Work) -> Work:
        assert work.faces is not None
        output = np.empty_like(work.frames)
        for index, (frame, faces) in enumerate(zip(work.frames, work.faces, strict=True)):
            output[index] = draw_faces(frame, faces) if faces else frame
        work.frames = output
        return work


@register("face_debugger")
def _build(context: ProcessorContext) -> FaceDebuggerProcessor:
    return FaceDebuggerProcessor.from_context(context)
