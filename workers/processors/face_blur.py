"""``face_blur``: anonymises footage by hiding every face: Gaussian blur, pixelation or a solid fill.

Privacy first: every face found is hidden, whatever the selector mode says (a face missed by a selector would be a
face left identifiable). In ``strict`` mode (the default) the faces are what the tracks say
(:mod:`workers.faces.track_feed`: low thresholds, doubtful detections kept, short gaps filled) and each box grows by
``blur_margin`` with a soft edge that fades out within the margin, so the box itself is hidden entirely. Without
``strict``, only the faces detected at ``detector_score`` are hidden, inside their boxes. Pixels outside the
(grown) boxes are left exactly as they were.

Each processor counts the face-frames it hid and how many of those its tracks filled in (:meth:`tally`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from shared.options import BlurStyle, BlurUncertain
from shared.tallies import FaceTally
from workers.faces.detection import Face, FaceDetector
from workers.faces.targeting import FaceTargeter
from workers.frames.backend import FrameBackend
from workers.frames.batch import Frames
from workers.frames.host import HostBackend
from workers.processors.base import FrameBatch, ProcessorContext, Stage, Work, register

logger = logging.getLogger(__name__)

Frame = npt.NDArray[np.uint8]
A = TypeVar("A")


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


def blur_faces(
    frame: Frame, faces: list[Face], strength: float, *, style: BlurStyle = "blur", margin: float = 0.0
) -> Frame:
    """A copy of ``frame`` with each face hidden (:meth:`FaceBlurProcessor.hide` on the host back-end).

    Args:
        frame: uint8 [H, W, 3].
        faces: the faces to hide.
        strength: the blur kernel (or, for ``pixelate``, four times the block) as a fraction of the box's longer
            side (``FaceOptions.blur_strength``).
        style: ``blur``, ``pixelate`` or ``fill`` (the region's mean colour).
        margin: each side of the box grows by this fraction of its size; the edge fades out within the margin.
    """
    backend = HostBackend()
    frames = backend.frames(bgr=frame[None].copy())
    hide_faces(backend, frames, [faces], strength, style=style, margin=margin)
    assert frames.bgr is not None
    return np.asarray(frames.bgr[0], np.uint8)


def hide_faces(
    backend: FrameBackend[A],
    frames: Frames[A],
    faces: Sequence[Sequence[Face]],
    strength: float,
    *,
    style: BlurStyle = "blur",
    margin: float = 0.0,
) -> None:
    """Hide each frame's faces in ``frames``, in place, on any back-end: the box (grown by ``margin`` of its size
    each side, its edge fading out within the margin) Gaussian-blurred by a kernel of ``strength`` of its longer
    side, pixelated in blocks of a quarter of that, or filled with its mean colour. Faces are hidden one after the
    other, each on the frame as the ones before left it."""
    shape = (frames.height, frames.width)
    for index, found in enumerate(faces):
        for face in found:
            box = grown_region(face, margin, shape)
            x1, y1, x2, y2 = box
            if x2 <= x1 or y2 <= y1:
                continue
            inner = None
            if margin > 0:
                bx1, by1, bx2, by2 = face_region(face, shape)
                inner = (bx1 - x1, by1 - y1, bx2 - x1, by2 - y1)
            longer = max(x2 - x1, y2 - y1)
            if style == "fill":
                backend.fill(frames, index, box, inner)
            elif style == "pixelate":  # blocks of about strength/4 of the face: 8 across at the default strength
                backend.pixelate(frames, index, box, max(2, round(strength / 4 * longer)), inner)
            else:
                backend.blur(frames, index, box, max(3, int(strength * longer) | 1), inner)


class FaceBlurProcessor:
    """Hides every face of each frame.

    Args:
        detector: finds the faces.
        strength: the blur kernel relative to the face size (0–1).
        style: blur, pixelate or fill.
        margin: the box's growth each side, relative to its size, with a soft edge within it (strict mode).
        uncertain: ``frame``: a frame where a track is lost (a face carried on past its last detection) is hidden
            whole (strict mode's ``face.blur_uncertain``); ``faces``: its faces alone.
    """

    targeter: FaceTargeter | None = None  # every detected face, whatever the selector mode

    touches_pixels = True

    def __init__(
        self,
        detector: FaceDetector,
        *,
        strength: float = 0.5,
        style: BlurStyle = "blur",
        margin: float = 0.0,
        uncertain: BlurUncertain = "faces",
    ) -> None:
        self.detector = detector
        self.strength = strength
        self.style: BlurStyle = style
        self.margin = margin
        self.uncertain: BlurUncertain = uncertain
        self.whole = 0  # frames hidden whole (a track lost there, uncertain="frame")
        self.hidden = 0  # face-frames hidden
        self.filled = 0  # of those, faces the tracks filled in
        self.frames = 0  # frames output
        self._runs = detector.runs  # the detector's model runs before this processor's chunk

    @classmethod
    def from_context(cls, context: ProcessorContext, *, detector: FaceDetector | None = None) -> FaceBlurProcessor:
        """Build from a job's context, loading the detector through the model registry if not given."""
        face = context.options.face
        detector = detector or FaceDetector.load(face, context.settings)
        margin = face.blur_margin if face.blur_strict else 0.0
        uncertain: BlurUncertain = face.blur_uncertain if face.blur_strict else "faces"
        return cls(detector, strength=face.blur_strength, style=face.blur_style, margin=margin, uncertain=uncertain)

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every detected face hidden."""
        return self._hidden(Work(frames, self.detector.detect(frames))).frames

    def _hidden(self, work: Work) -> Work:
        """The batch's faces hidden in its frames on its frame back-end."""
        assert work.faces is not None
        backend, frames = work.on_backend()
        self.hide(backend, frames, work.faces)
        return work

    def hide(self, backend: FrameBackend[A], frames: Frames[A], faces: Sequence[Sequence[Face]]) -> None:
        """Hide ``faces`` (per frame) in ``frames`` on ``backend``, in place, and count them; with ``uncertain``
        ``frame``, a frame where a track is lost is hidden whole."""
        shown: list[Sequence[Face]] = list(faces)
        if self.uncertain == "frame":
            # fail closed: a face the tracks lost here could be anywhere near, so nothing of the frame shows
            box = np.asarray([0, 0, frames.width, frames.height], np.float32)
            whole = Face(box=box, landmarks=np.zeros((5, 2), np.float32), score=1.0)
            for index, found in enumerate(faces):
                if any(face.lost for face in found):
                    shown[index] = [whole]
                    self.whole += 1
        hide_faces(backend, frames, shown, self.strength, style=self.style, margin=self.margin)
        self.frames += len(faces)
        for found in faces:
            self.hidden += len(found)
            self.filled += sum(face.filled for face in found)

    def stages(self) -> tuple[Stage, ...]:
        """One stage after the chain's detection: every face found."""
        return (self._hidden,)

    def tally(self) -> FaceTally:
        """What this processor did, for the job's events: face-frames hidden, how many tracks filled in, and the
        detector's model runs (every pass and tile of strict mode's sweep) for the frames output."""
        calls = self.detector.runs - self._runs
        return FaceTally("face_blur", self.hidden, self.filled, calls, self.frames, self.whole)


@register("face_blur")
def _build(context: ProcessorContext) -> FaceBlurProcessor:
    return FaceBlurProcessor.from_context(context)
