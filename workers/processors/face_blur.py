"""``face_blur``: anonymises footage by hiding every face: Gaussian blur, pixelation or a solid fill.

Privacy first: every face found is hidden, whatever the selector mode says (a face missed by a selector would be a
face left identifiable). In ``strict`` mode (the default) the faces are what the tracks say
(:mod:`workers.track_feed`: low thresholds, doubtful detections kept, short gaps filled) and each box grows by
``blur_margin`` with a soft edge that fades out within the margin, so the box itself is hidden entirely. Without
``strict``, only the faces detected at ``detector_score`` are hidden, inside their boxes. Pixels outside the
(grown) boxes are left exactly as they were.

Each processor counts the face-frames it hid and how many of those its tracks filled in (:meth:`tally`).
"""

from __future__ import annotations

import logging

import cv2
import numpy as np
import numpy.typing as npt

from shared.options import BlurStyle
from shared.tallies import FaceTally
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


def grown_region(face: Face, margin: float, frame_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """The face's box grown by ``margin`` of its size each side, in whole pixels, clipped to the frame."""
    if margin <= 0:
        return face_region(face, frame_shape)
    size = face.box[2:] - face.box[:2]
    grown = np.concatenate([face.box[:2] - size * margin, face.box[2:] + size * margin]).astype(np.float32)
    return face_region(Face(box=grown, landmarks=face.landmarks, score=face.score), frame_shape)


def _hidden(region: Frame, style: BlurStyle, strength: float) -> Frame:
    height, width = region.shape[:2]
    if style == "fill":
        return np.broadcast_to(region.reshape(-1, 3).mean(axis=0).astype(np.uint8), region.shape).copy()
    if style == "pixelate":
        # blocks of about strength/4 of the face: 8 across at the default strength
        block = max(2, round(strength / 4 * max(height, width)))
        small = cv2.resize(region, (max(1, width // block), max(1, height // block)), interpolation=cv2.INTER_AREA)
        return np.asarray(cv2.resize(small, (width, height), interpolation=cv2.INTER_NEAREST), np.uint8)
    kernel = max(3, int(strength * max(height, width)) | 1)
    return np.asarray(cv2.GaussianBlur(region, (kernel, kernel), 0), np.uint8)


def _soft_mask(height: int, width: int, inner: tuple[int, int, int, int]) -> npt.NDArray[np.float32]:
    """1 inside ``inner`` (x1, y1, x2, y2 within the region), falling linearly to 0 at the region's edge."""
    ys = np.arange(height, dtype=np.float32)[:, None]
    xs = np.arange(width, dtype=np.float32)[None, :]
    x1, y1, x2, y2 = inner

    def ramp(pos: npt.NDArray[np.float32], lo: int, hi: int, extent: int) -> npt.NDArray[np.float32]:
        before = np.clip((pos + 1) / max(lo, 1), 0, 1) if lo > 0 else np.ones_like(pos)
        after = np.clip((extent - pos) / max(extent - hi, 1), 0, 1) if hi < extent else np.ones_like(pos)
        return np.asarray(np.minimum(before, after), np.float32)

    return np.asarray(ramp(ys, y1, y2, height) * ramp(xs, x1, x2, width), np.float32)


def blur_faces(
    frame: Frame, faces: list[Face], strength: float, *, style: BlurStyle = "blur", margin: float = 0.0
) -> Frame:
    """A copy of ``frame`` with each face hidden.

    Args:
        frame: uint8 [H, W, 3].
        faces: the faces to hide.
        strength: the blur kernel (or, for ``pixelate``, four times the block) as a fraction of the box's longer
            side (``FaceOptions.blur_strength``).
        style: ``blur``, ``pixelate`` or ``fill`` (the region's mean colour).
        margin: each side of the box grows by this fraction of its size; the edge fades out within the margin.
    """
    output = frame.copy()
    for face in faces:
        x1, y1, x2, y2 = grown_region(face, margin, frame.shape)
        if x2 <= x1 or y2 <= y1:
            continue
        hidden = _hidden(output[y1:y2, x1:x2], style, strength)
        if margin <= 0:
            output[y1:y2, x1:x2] = hidden
            continue
        bx1, by1, bx2, by2 = face_region(face, frame.shape)
        inner = (bx1 - x1, by1 - y1, bx2 - x1, by2 - y1)
        alpha = _soft_mask(y2 - y1, x2 - x1, inner)[..., None]
        region = output[y1:y2, x1:x2].astype(np.float32)
        output[y1:y2, x1:x2] = np.clip(hidden * alpha + region * (1 - alpha) + 0.5, 0, 255).astype(np.uint8)
    return output


class FaceBlurProcessor:
    """Hides every face of each frame.

    Args:
        detector: finds the faces.
        strength: the blur kernel relative to the face size (0–1).
        style: blur, pixelate or fill.
        margin: the box's growth each side, relative to its size, with a soft edge within it (strict mode).
    """

    targeter: FaceTargeter | None = None  # every detected face, whatever the selector mode

    touches_pixels = True

    def __init__(
        self, detector: FaceDetector, *, strength: float = 0.5, style: BlurStyle = "blur", margin: float = 0.0
    ) -> None:
        self.detector = detector
        self.strength = strength
        self.style: BlurStyle = style
        self.margin = margin
        self.hidden = 0  # face-frames hidden
        self.filled = 0  # of those, faces the tracks filled in

    @classmethod
    def from_context(cls, context: ProcessorContext, *, detector: FaceDetector | None = None) -> FaceBlurProcessor:
        """Build from a job's context, loading the detector through the model registry if not given."""
        face = context.options.face
        detector = detector or FaceDetector.load(face, context.settings)
        margin = face.blur_margin if face.blur_strict else 0.0
        return cls(detector, strength=face.blur_strength, style=face.blur_style, margin=margin)

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every detected face hidden."""
        return self._apply(Work(frames, self.detector.detect(frames))).frames

    def stages(self) -> tuple[Stage, ...]:
        """One stage after the chain's detection: every face found."""
        return (self._apply,)

    def tally(self) -> FaceTally:
        """What this processor did, for the job's events: face-frames hidden, and how many tracks filled in."""
        return FaceTally("face_blur", self.hidden, self.filled)

    def _apply(self, work: Work) -> Work:
        assert work.faces is not None
        output = np.empty_like(work.frames)
        for index, (frame, faces) in enumerate(zip(work.frames, work.faces, strict=True)):
            output[index] = (
                blur_faces(frame, faces, self.strength, style=self.style, margin=self.margin) if faces else frame
            )
            self.hidden += len(faces)
            self.filled += sum(face.filled for face in faces)
        work.frames = output
        return work


@register("face_blur")
def _build(context: ProcessorContext) -> FaceBlurProcessor:
    return FaceBlurProcessor.from_context(context)
