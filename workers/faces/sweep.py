"""An anonymiser's detection sweep: the whole frame, the frame in tiles at the scale its smallest face needs, and the
frame turned both ways.

Detectors are trained on upright faces a few dozen pixels tall and more: YuNet's score for a face turned 30–40°
in-plane, or under about :data:`~shared.strict_blur.RELIABLE_FACE` px tall in its input, falls from about 0.8 to
under 0.1 (measured on faces cut from the reference images). A 1280-px frame shrunk into a 640-px input halves every
face, so an anonymiser's sweep also detects:

* the frame in tiles of the model's input (``face.detector_size``'s tiling, :meth:`FaceDetector.detect_frame`) at
  the scale where ``min_face`` source pixels are :data:`~shared.strict_blur.RELIABLE_FACE` detector pixels: at
  native resolution, enlarged or shrunk as that asks;
* the frame turned by ±:data:`TURN` degrees (a face turned by up to 40° is then within 10–15° of upright in one of
  them), tiled for faces :data:`~shared.strict_blur.TURN_MIN_FACE_FACTOR` times ``min_face``;
* with a second detector, the whole frame and the upright tiles again with it.

What every pass finds is mapped back into the frame and merged by NMS. A face found on a turned frame keeps its
landmarks (turned back exactly) and gets an upright box of the same size around the same centre. :attr:`calls`
counts the model runs, every pass and tile included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import cv2
import numpy as np
import numpy.typing as npt

from shared.strict_blur import MIN_FACE, RELIABLE_FACE, TURN, TURN_MIN_FACE_FACTOR, ZOOM, ZOOM_UP_TO
from workers.faces.detection import TILE_OVERLAP, Face, FaceDetector, suppress_faces

__all__ = ["TURN", "ZOOM", "ZOOM_UP_TO", "DetectionSweep"]  # the numbers live in shared.strict_blur

Frame = npt.NDArray[np.uint8]


def _round32(value: float) -> int:
    return int(math.ceil(value / 32) * 32)


class DetectionSweep:
    """Detects with ``detector`` on several views of each frame and merges the faces found.

    Args:
        detector: the job's detector (its ``detector_size`` is honoured in the whole-frame pass).
        turns: the angles (degrees) of the extra turned passes.
        others: more detectors (``face.strict_second_detector``), each run on the whole frame and on the upright
            tiles: what they find is added to what the job's detector finds, whatever the models' scores disagree on.
        min_face: the smallest face to find (box height, px at the source resolution: ``face.blur_min_face``).
    """

    def __init__(
        self,
        detector: FaceDetector,
        *,
        turns: Sequence[float] = (TURN, -TURN),
        others: Sequence[FaceDetector] = (),
        min_face: float = MIN_FACE,
    ) -> None:
        self.detector = detector
        self.turns = tuple(turns)
        self.others = tuple(others)
        self.min_face = float(min_face)
        self.calls = 0  # model runs, every detector, pass and tile

    def detect(self, frames: npt.NDArray[np.uint8] | Sequence[Frame], score: float | None = None) -> list[list[Face]]:
        """The faces of each frame, one list per frame, in order."""
        return [self.detect_frame(frame, score) for frame in frames]

    def detect_frame(self, frame: Frame, score: float | None = None) -> list[Face]:
        """The faces of one frame found by any pass, merged (highest score first)."""
        threshold = self.detector.score if score is None else score
        scale = RELIABLE_FACE / self.min_face
        found: list[Face] = []
        for model in (self.detector, *self.others):
            found += self._run(model, lambda m: m.detect_frame(frame, threshold))
            found += self._tiled(model, frame, scale, threshold)
        for angle in self.turns:
            found += self._turned(frame, angle, scale / TURN_MIN_FACE_FACTOR, threshold)
        return suppress_faces(found, threshold)

    def _run(self, model: FaceDetector, call: Callable[[FaceDetector], list[Face]]) -> list[Face]:
        before = model.runs
        faces = call(model)
        self.calls += model.runs - before
        return faces

    def _tiled(self, model: FaceDetector, frame: Frame, scale: float, threshold: float) -> list[Face]:
        """The faces found in tiles of the frame seen at ``scale`` (detector px per source px); none where the
        whole-frame pass sees the frame at that scale or finer already."""
        height, width = frame.shape[:2]
        longer = max(height, width)
        if scale <= min(model.view / longer, 1.0) + 1e-6:
            return []
        factor = 1.0
        picture = frame
        if scale > 1.0:
            factor = scale
            size = (max(1, round(width * factor)), max(1, round(height * factor)))
            picture = np.asarray(cv2.resize(frame, size, interpolation=cv2.INTER_CUBIC), np.uint8)
        per_pixel = min(scale / factor, 1.0)  # tile pixels per pixel of ``picture``
        view = _round32(max(picture.shape[:2]) * per_pixel)
        tiled = FaceDetector(model.engine, model.detector, size=view, score=threshold, input_size=model.size)
        # the whole pass ran already, and finds the faces larger than the tiles' overlap: a box that large in a
        # tile is the tiles' false alarm (measured: a 422-px box on a plate at score 0.17)
        largest = TILE_OVERLAP * model.size / per_pixel  # in pixels of ``picture``
        faces = [
            face
            for face in tiled.detect_frame(picture, threshold, whole_pass=False)
            if float(face.box[3] - face.box[1]) <= largest and float(face.box[2] - face.box[0]) <= largest
        ]
        self.calls += tiled.runs
        model.runs += tiled.runs  # the model's runs, whichever view ran them
        if factor == 1.0:
            return faces
        return [
            Face(
                box=(face.box / factor).astype(np.float32),
                landmarks=(face.landmarks / factor).astype(np.float32),
                score=face.score,
            )
            for face in faces
        ]

    def _turned(self, frame: Frame, angle: float, scale: float, threshold: float) -> list[Face]:
        height, width = frame.shape[:2]
        matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
        cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
        out_w, out_h = int(height * sin + width * cos), int(height * cos + width * sin)
        matrix[0, 2] += out_w / 2 - width / 2
        matrix[1, 2] += out_h / 2 - height / 2
        turned = np.asarray(cv2.warpAffine(frame, matrix, (out_w, out_h)), np.uint8)
        back = cv2.invertAffineTransform(matrix)
        found = self._run(self.detector, lambda m: m.detect_frame(turned, threshold))
        found += self._tiled(self.detector, turned, scale, threshold)
        faces = []
        for face in found:
            centre = (face.box[:2] + face.box[2:]) / 2
            size = face.box[2:] - face.box[:2]
            centre_back = back[:, :2] @ centre + back[:, 2]
            points = face.landmarks @ back[:, :2].T + back[:, 2]
            box = np.concatenate([centre_back - size / 2, centre_back + size / 2]).astype(np.float32)
            faces.append(Face(box=box, landmarks=points.astype(np.float32), score=face.score))
        return faces
