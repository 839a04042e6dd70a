"""An anonymiser's detection sweep: the frame as it is, turned both ways, and enlarged where it is small.

Detectors are trained on upright faces a few dozen pixels tall and more: YuNet's score for a face turned 30–40°
in-plane, or 30–40 px tall, falls from about 0.8 to under 0.1 (measured on faces cut from ``group6.jpg``). An
anonymiser cannot leave those faces showing, so its sweep also detects on the frame turned by ±:data:`TURN`
degrees (a face turned by up to 40° is then within 10–15° of upright in one of them) and, for frames up to
:data:`ZOOM_UP_TO` px on their longer side, on the frame enlarged :data:`ZOOM` times (in tiles of the model's input).
What every pass finds is mapped back into the frame and merged by NMS.

A face found on a turned frame keeps its landmarks (turned back exactly) and gets an upright box of the same size
around the same centre.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

from shared.strict_blur import TURN, ZOOM, ZOOM_UP_TO
from workers.faces.detection import Face, FaceDetector, suppress_faces

__all__ = ["TURN", "ZOOM", "ZOOM_UP_TO", "DetectionSweep"]  # the numbers live in shared.strict_blur

Frame = npt.NDArray[np.uint8]


def _round32(value: float) -> int:
    return int(math.ceil(value / 32) * 32)


class DetectionSweep:
    """Detects with ``detector`` on several views of each frame and merges the faces found.

    Args:
        detector: the job's detector (its ``detector_size`` is honoured in each pass).
        turns: the angles (degrees) of the extra turned passes.
        others: more detectors (``face.strict_second_detector``), each run once on the frame as it is: what they
            find is added to what the job's detector finds, whatever the models' scores disagree on.
    """

    def __init__(
        self, detector: FaceDetector, *, turns: Sequence[float] = (TURN, -TURN), others: Sequence[FaceDetector] = ()
    ) -> None:
        self.detector = detector
        self.turns = tuple(turns)
        self.others = tuple(others)

    def detect(self, frames: npt.NDArray[np.uint8] | Sequence[Frame], score: float | None = None) -> list[list[Face]]:
        """The faces of each frame, one list per frame, in order."""
        return [self.detect_frame(frame, score) for frame in frames]

    def detect_frame(self, frame: Frame, score: float | None = None) -> list[Face]:
        """The faces of one frame found by any pass, merged (highest score first)."""
        threshold = self.detector.score if score is None else score
        found = list(self.detector.detect_frame(frame, threshold))
        for other in self.others:
            found += other.detect_frame(frame, threshold)
        for angle in self.turns:
            found += self._turned(frame, angle, threshold)
        height, width = frame.shape[:2]
        if max(height, width) <= ZOOM_UP_TO:
            found += self._enlarged(frame, threshold)
        return suppress_faces(found, threshold)

    def _turned(self, frame: Frame, angle: float, threshold: float) -> list[Face]:
        height, width = frame.shape[:2]
        matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
        cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
        out_w, out_h = int(height * sin + width * cos), int(height * cos + width * sin)
        matrix[0, 2] += out_w / 2 - width / 2
        matrix[1, 2] += out_h / 2 - height / 2
        turned = np.asarray(cv2.warpAffine(frame, matrix, (out_w, out_h)), np.uint8)
        back = cv2.invertAffineTransform(matrix)
        faces = []
        for face in self.detector.detect_frame(turned, threshold):
            centre = (face.box[:2] + face.box[2:]) / 2
            size = face.box[2:] - face.box[:2]
            centre_back = back[:, :2] @ centre + back[:, 2]
            points = face.landmarks @ back[:, :2].T + back[:, 2]
            box = np.concatenate([centre_back - size / 2, centre_back + size / 2]).astype(np.float32)
            faces.append(Face(box=box, landmarks=points.astype(np.float32), score=face.score))
        return faces

    def _enlarged(self, frame: Frame, threshold: float) -> list[Face]:
        height, width = frame.shape[:2]
        big = np.asarray(cv2.resize(frame, (width * ZOOM, height * ZOOM), interpolation=cv2.INTER_CUBIC), np.uint8)
        tiled = FaceDetector(
            self.detector.engine,
            self.detector.detector,
            size=_round32(max(big.shape[:2])),
            score=threshold,
            input_size=self.detector.size,
        )
        return [
            Face(
                box=(face.box / ZOOM).astype(np.float32),
                landmarks=(face.landmarks / ZOOM).astype(np.float32),
                score=face.score,
            )
            for face in tiled.detect_frame(big, threshold, whole_pass=False)  # the plain pass was the whole frame
        ]
