"""``face_blur``: anonymises footage by blurring every detected face.

Privacy first: every face the detector finds is blurred, whatever the selector mode says (a face missed by a
selector would be a face left identifiable). Pixels outside the face boxes are left exactly as they were.
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


def face_region(face: Face, frame_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The face's box in whole pixels, ``x1, y1, x2, y2``, clipped to the frame (may be empty)."""
    height, width = frame_shape[:2]
    x1, y1 = np.floor(face.box[:2]).astype(int)
    x2, y2 = np.ceil(face.box[2:]).astype(int)
    return (
        int(np.clip(x1, 0, width)),
        int(np.clip(y1, 0, height)),
        int(np.clip(x2, 0, width)),
        int(np.clip(y2, 0, height)),
    )


def blur_faces(frame: Frame, faces: list[Face], strength: float) -> Frame:
    """A copy of ``frame`` with each face's box Gaussian-blurred.

    Args:
        frame: uint8 [H, W, 3].
        faces: the faces to blur.
        strength: the kernel side as a fraction of the box's longer side (``FaceOptions.blur_strength``).
    """
    output = frame.copy()
    for face in faces:
        x1, y1, x2, y2 = face_region(face, frame.shape)
        if x2 <= x1 or y2 <= y1:
            continue
        kernel = max(3, int(strength * max(x2 - x1, y2 - y1)) | 1)
        output[y1:y2, x1:x2] = cv2.GaussianBlur(frame[y1:y2, x1:x2], (kernel, kernel), 0)
    return output


class FaceBlurProcessor:
    """Blurs every detected face of each frame.

    Args:
        detector: finds the faces.
        strength: the blur kernel relative to the face size (0–1).
    """

    targeter: FaceTargeter | None = None  # every detected face, whatever the selector mode

    touches_pixels = True

    def __init__(self, detector: FaceDetector, *, strength: float = 0.5) -> None:
        self.detector = detector
        self.strength = strength

    @classmethod
    def from_context(cls, context: ProcessorContext, *, detector: FaceDetector | None = None) -> FaceBlurProcessor:
        """Build from a job's context, loading the detector through the model registry if not given."""
        face = context.options.face
        detector = detector or FaceDetector.load(face, context.settings)
        return cls(detector, strength=face.blur_strength)

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every detected face blurred."""
        return self._apply(Work(frames, self.detector.detect(frames))).frames

    def stages(self) -> tuple[Stage, ...]:
        """One stage after the chain's detection: every detected face."""
        return (self._apply,)

    def _apply(self, work: Work) -> Work:
        assert work.faces is not None
        output = np.empty_like(work.frames)
        for index, (frame, faces) in enumerate(zip(work.frames, work.faces, strict=True)):
            output[index] = blur_faces(frame, faces, self.strength) if faces else frame
        work.frames = output
        return work


@register("face_blur")
def _build(context: ProcessorContext) -> FaceBlurProcessor:
    return FaceBlurProcessor.from_context(context)
