"""68-point face landmarks, as FaceFusion's ``face_landmarker`` finds them, for a whole batch of faces at once.

* ``fan_68_5`` lifts the detector's 5 points to 68: the 5 points are mapped into the unit ``ffhq_512`` square
  (the similarity onto that template at size 1), lifted, and mapped back.
* ``2dfan4`` (when ``face.landmarker_score`` > 0) looks at a 256² crop around the detector's box (scale
  195 / the box's longest side, centred) and gives 68 points and heatmaps; the landmark score is the mean of the
  heatmaps' peaks, mapped from 0…0.9 to 0…1. Its points replace the lifted ones, and when the score passes
  ``landmarker_score`` the face is aligned by the 5 points derived from them (eye centres, nose tip, mouth
  corners) instead of the detector's.

  The crop is turned by the face's roll rounded to a quarter turn (from the jaw line of the lifted points, as
  FaceFusion's ``estimate_face_angle``), so a face lying on its side or upside down reaches 2dfan4 upright; within
  ±45° of upright, 2dfan4 takes the face as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import ModelError
from shared.settings import Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.faces.alignment import estimate_transform
from workers.faces.detection import Face
from workers.models.download import resolve
from workers.models.registry import REGISTRY

logger = logging.getLogger(__name__)

Points = npt.NDArray[np.float32]
Frames = npt.NDArray[np.uint8]

FAN_SIZE = 256
_FAN_SCALE = 195.0
_HEATMAP_SIZE = 64
_SCORE_RANGE = (0.0, 0.9)
_DARK_LIGHTNESS = 30


def _transform(points: npt.ArrayLike, matrix: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``points`` [K, 2] through the 2×3 ``matrix``."""
    array = np.asarray(points, np.float64)
    affine = np.asarray(matrix, np.float64)
    return array @ affine[:, :2].T + affine[:, 2]


def roll_angle(landmarks68: npt.ArrayLike) -> int:
    """The face's roll rounded to a quarter turn (0, 90, 180 or 270 degrees, counter-clockwise as
    ``cv2.getRotationMatrix2D`` turns), from the direction of its jaw line (point 0 to point 16)."""
    points = np.asarray(landmarks68, np.float64)
    dx, dy = points[16] - points[0]
    theta = float(np.degrees(np.arctan2(dy, dx))) % 360.0
    return int(round(theta / 90.0)) % 4 * 90


def fan_crop_matrix(box: npt.ArrayLike, angle: int) -> npt.NDArray[np.float64]:
    """The 2×3 matrix from frame pixels to 2dfan4's 256² crop: the box centred and scaled to 195 px on its longest
    side, then turned by ``angle`` degrees about the crop's centre (a quarter turn keeps the crop 256²)."""
    corners = np.asarray(box, np.float64)
    scale = _FAN_SCALE / max(float((corners[2:] - corners[:2]).max()), 1.0)
    tx, ty = (FAN_SIZE - (corners[2:] + corners[:2]) * scale) * 0.5
    placed = np.array([[scale, 0.0, tx], [0.0, scale, ty], [0.0, 0.0, 1.0]])
    turned = np.vstack([cv2.getRotationMatrix2D((FAN_SIZE / 2, FAN_SIZE / 2), float(angle), 1.0), [0.0, 0.0, 1.0]])
    combined: npt.NDArray[np.float64] = (turned @ placed)[:2]
    return combined


def five_from_68(landmarks: npt.ArrayLike) -> Points:
    """The 5 alignment points of 68 landmarks: eye centres, nose tip, mouth corners (FaceFusion's
    ``convert_to_face_landmark_5``)."""
    points = np.asarray(landmarks, np.float32)
    return np.stack(
        [points[36:42].mean(axis=0), points[42:48].mean(axis=0), points[30], points[48], points[54]]
    ).astype(np.float32)


@dataclass(frozen=True)
class Landmarks68:
    """The 68 points of each face of a batch and how far 2dfan4 trusted them.

    Attributes:
        faces: the faces, each with the 5 points it should be aligned by (refined where the score passed).
        points: float32 [68, 2] per face, in frame pixels.
        scores: the 2dfan4 landmark score per face (0 when only the lift ran).
    """

    faces: list[list[Face]]
    points: list[Points]
    scores: list[float]


class _Model:
    def __init__(self, engine: Engine, fixed_batch: int | None, loaded: LoadedModel | None) -> None:
        self.engine, self.fixed_batch, self.loaded = engine, fixed_batch, loaded

    def run(self, tensor: npt.NDArray[np.float32]) -> list[npt.NDArray[np.generic]]:
        name = self.engine.input_names[0]

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {name: tensor[items]}

        return run_in_batches(self.engine, len(tensor), inputs, self.fixed_batch)


class FaceLandmarker:
    """``fan_68_5`` and, optionally, ``2dfan4``, run over every face of a batch of frames in one call each.

    Args:
        lift: the ``fan_68_5`` engine ([N, 5, 2] → [N, 68, 2]).
        fan: the ``2dfan4`` engine, or ``None`` to use the lifted points only.
        min_score: the landmark score above which a face is aligned by its 2dfan4 points.
    """

    def __init__(
        self,
        lift: Engine,
        fan: Engine | None = None,
        *,
        min_score: float = 0.5,
        lift_batch: int | None = None,
        fan_batch: int | None = None,
        loaded: Sequence[LoadedModel] = (),
    ) -> None:
        self._lift = _Model(lift, lift_batch, None)
        self._fan = _Model(fan, fan_batch, None) if fan is not None else None
        self.min_score = min_score
        self._loaded = list(loaded)

    @classmethod
    def load(cls, settings: Settings, *, min_score: float) -> FaceLandmarker:
        """Load ``fan_68_5``, and ``2dfan4`` when ``min_score`` > 0.

        Raises:
            ModelError: a model cannot be found, verified or loaded.
        """
        loaded = [_load("fan_68_5", settings)]
        if min_score > 0:
            loaded.append(_load("2dfan4", settings))
        fan = loaded[1] if len(loaded) > 1 else None
        return cls(
            loaded[0].engine,
            fan.engine if fan else None,
            min_score=min_score,
            lift_batch=loaded[0].fixed_batch,
            fan_batch=fan.fixed_batch if fan else None,
            loaded=loaded,
        )

    def degradations(self) -> list[Degradation]:
        """The slower paths the landmark models are on."""
        return [found for model in self._loaded for found in model.degradations()]

    def lift(self, landmarks5: npt.ArrayLike) -> Points:
        """68 points from 5 for each face: float [M, 5, 2] in frame pixels → float32 [M, 68, 2]."""
        fives = np.asarray(landmarks5, np.float64).reshape(-1, 5, 2)
        if len(fives) == 0:
            return np.zeros((0, 68, 2), np.float32)
        matrices = [estimate_transform(five, "ffhq_512", 1) for five in fives]
        unit = np.stack([_transform(five, m) for five, m in zip(fives, matrices, strict=True)]).astype(np.float32)
        lifted = np.asarray(self._lift.run(unit)[0], np.float64).reshape(len(fives), 68, 2)
        back = [_transform(points, cv2.invertAffineTransform(m)) for points, m in zip(lifted, matrices, strict=True)]
        return np.stack(back).astype(np.float32)

    def detect(
        self,
        frames: Frames | Sequence[Frames],
        faces: Sequence[Face],
        frame_indices: Sequence[int],
        angles: Sequence[int] | None = None,
    ) -> tuple[Points, npt.NDArray[np.float32]]:
        """2dfan4's 68 points and landmark score of each face (in frame pixels); ``angles`` (see
        :func:`roll_angle`) turn each face's crop upright, none for faces taken as upright.

        Raises:
            ModelError: 2dfan4 is not loaded.
        """
        if self._fan is None:
            raise ModelError("the 2dfan4 landmarker is not loaded")
        if not faces:
            return np.zeros((0, 68, 2), np.float32), np.zeros((0,), np.float32)
        turns = list(angles) if angles is not None else [0] * len(faces)
        matrices = [fan_crop_matrix(face.box, angle) for face, angle in zip(faces, turns, strict=True)]
        crops = [
            _brighten_if_dark(np.asarray(cv2.warpAffine(frames[index], matrix, (FAN_SIZE, FAN_SIZE)), np.uint8))
            for index, matrix in zip(frame_indices, matrices, strict=True)
        ]
        tensor = np.ascontiguousarray(np.stack(crops).transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0))
        outputs = self._fan.run(tensor)
        points = np.asarray(outputs[0], np.float64)[:, :, :2] / _HEATMAP_SIZE * FAN_SIZE
        heatmaps = np.asarray(outputs[1], np.float32)
        scores = np.interp(heatmaps.max(axis=(2, 3)).mean(axis=1), _SCORE_RANGE, (0.0, 1.0)).astype(np.float32)
        frame_points = np.stack(
            [_transform(p, cv2.invertAffineTransform(m)) for p, m in zip(points, matrices, strict=True)]
        )
        return frame_points.astype(np.float32), scores

    def landmarks(self, frames: Frames | Sequence[Frames], faces_per_frame: Sequence[Sequence[Face]]) -> Landmarks68:
        """The 68 points of every listed face of every frame, and each face with its alignment points."""
        flat = [face for faces in faces_per_frame for face in faces]
        indices = [index for index, faces in enumerate(faces_per_frame) for _ in faces]
        points = self.lift(np.stack([face.landmarks for face in flat]) if flat else np.zeros((0, 5, 2)))
        scores = np.zeros(len(flat), np.float32)
        if self._fan is not None and flat:
            points, scores = self.detect(frames, flat, indices, [roll_angle(lifted) for lifted in points])
        refined = [
            replace(face, landmarks=five_from_68(found)) if score > self.min_score else face
            for face, found, score in zip(flat, points, scores, strict=True)
        ]
        faces_out: list[list[Face]] = []
        start = 0
        for faces in faces_per_frame:
            faces_out.append(refined[start : start + len(faces)])
            start += len(faces)
        return Landmarks68(faces_out, list(points), [float(score) for score in scores])


def _load(name: str, settings: Settings) -> LoadedModel:
    return load_model(resolve(name, settings), settings, name=name, batch_input=REGISTRY[name].input_names[0])


def _brighten_if_dark(crop: Frames) -> Frames:
    """CLAHE on the lightness of a dark crop (mean L < 30), as FaceFusion does before 2dfan4."""
    lab = cv2.cvtColor(crop, cv2.COLOR_BGR2Lab)
    if float(np.mean(lab[:, :, 0])) >= _DARK_LIGHTNESS:
        return crop
    lab[:, :, 0] = cv2.createCLAHE(clipLimit=2).apply(lab[:, :, 0])
    return np.asarray(cv2.cvtColor(lab, cv2.COLOR_Lab2BGR), np.uint8)
