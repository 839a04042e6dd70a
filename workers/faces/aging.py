"""Face ageing, the ``age_modifier``'s models over aligned crops (docs/MODELS.md 10.1).

Both models' crops are pasted back at :data:`PASTE_SIZE` (1024 px), on their own template:

* **fran** — the crop is ffhq_512 at 1024. It goes in as ``target`` [n, 3, 1024, 1024] RGB in [0, 1] with
  ``direction`` f32 [2] = (the face's age, the age wanted) / 100, clipped to [0, 1] (:func:`fran_directions`);
  ``direction`` has no batch axis, so the faces of one direction (one FairFace bracket) go through in one call. The
  output [n, 3, 1024, 1024] RGB in [0, 1] is the aged crop.
* **styleganex_age** — the crop is the face with its background: styleganex_384 from the five points scaled by
  0.875 about the nose (:func:`widen`), at 1024. The model sees it area-averaged to 384 (``target_with_background``)
  and the face alone, ffhq_512 at 256 (``target``), warped from the same crop by each face's own matrix
  (:func:`styleganex_matrices`); both RGB in [-1, 1], with ``direction`` f32 0-d, 2.5 at -100 to -2.5 at +100, one for
  every face. Its output [n, 3, S, S] in [-1, 1] is area-resized to 1024 and given the crop's colour
  (:func:`~workers.faces.colour_matching.match_colour`).
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np
import numpy.typing as npt

from shared.age_options import AgeModifierModel
from shared.errors import ModelError
from shared.settings import Settings
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches, Indices
from workers.engines.loading import LoadedModel
from workers.faces.alignment import estimate_transform, warp_faces
from workers.faces.attributes import FaceAttributes
from workers.faces.colour_matching import match_colour
from workers.faces.crop_model import CropModel, Inputs, load_heavy
from workers.faces.tensors import Crops, crops_to_tensor
from workers.models.registry import REGISTRY, ModelSpec

__all__ = [
    "PASTE_SIZE",
    "AgeModel",
    "Fran",
    "StyleganexAge",
    "fran_directions",
    "styleganex_matrices",
    "widen",
]

FloatArray = npt.NDArray[np.float32]

PASTE_SIZE = 1024
WIDEN = 0.875  # the five points scaled about the nose for styleganex's crop with background
_FACE_SIDE = 256  # styleganex's ``target``: the face alone, ffhq_512 at 256
_BACKGROUND_SIDE = 384  # its ``target_with_background``
_STYLEGANEX_DIRECTION = 2.5  # its ``direction`` at age_modifier.direction -100 (and minus it at +100)


def fran_directions(attributes: Sequence[FaceAttributes], years: int) -> FloatArray:
    """fran's ``direction`` per face, ``[n, 2]``: (age, age + ``years``) / 100, clipped to [0, 1], the age being the
    mean of the face's FairFace bracket as FaceFusion takes it (``mean(range(first, last))``: 0.5, 5.5, 14 … 84.5)."""
    ages = np.array([(first + last - 1) / 2 for first, last in (found.age for found in attributes)], np.float32)
    pairs = np.stack([ages, ages + np.float32(years)], axis=1) if len(ages) else np.zeros((0, 2), np.float32)
    directions: FloatArray = np.clip(pairs / 100, 0.0, 1.0).astype(np.float32)
    return directions


def widen(landmarks: npt.ArrayLike, scale: float = WIDEN) -> FloatArray:
    """Five points scaled by ``scale`` about the nose (the third): styleganex's crop shows more around the face."""
    points = np.asarray(landmarks, np.float32)
    nose = points[2]
    scaled: FloatArray = (nose + (points - nose) * np.float32(scale)).astype(np.float32)
    return scaled


def styleganex_matrices(widened: Sequence[npt.ArrayLike]) -> FloatArray:
    """Per face, from its widened five points (:func:`widen`): the 2×3 matrix that takes its 1024 crop with
    background to its ffhq_512 crop at 256, flattened to a row of 6 (the face alone, warped from the same crop)."""
    rows = []
    for points in widened:
        wide = np.asarray(points, np.float64)
        own = widen(wide, 1.0 / WIDEN).astype(np.float64)  # the face's own points again (the nose did not move)
        to_crop = np.vstack([estimate_transform(wide, "styleganex_384", PASTE_SIZE), [0.0, 0.0, 1.0]])
        to_face = np.vstack([estimate_transform(own, "ffhq_512", _FACE_SIDE), [0.0, 0.0, 1.0]])
        rows.append((to_face @ np.linalg.inv(to_crop))[:2].ravel())
    return np.asarray(rows, np.float32).reshape(-1, 6)


class AgeModel(CropModel):
    """One age model, loaded: :meth:`modify` ages aligned crops of :data:`PASTE_SIZE`.

    Build it with :meth:`load`; tests may build a subclass from any :class:`~workers.engines.base.Engine`.
    """

    def __init__(
        self,
        spec: ModelSpec,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        """Raises:
        ModelError: the engine lacks one of the spec's inputs.
        """
        super().__init__(spec, engine, inputs=spec.input_names, fixed_batch=fixed_batch, batches=batches, loaded=loaded)

    @classmethod
    def load(cls, name: AgeModifierModel, settings: Settings) -> AgeModel:
        """Resolve (download if needed) and load age model ``name``.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec = REGISTRY[name]
        _, loaded = load_heavy(spec, settings, batch_input=spec.input_names[0])
        kind = _AGE_MODELS[name]
        return kind(spec, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    @property
    def size(self) -> int:
        """The side of the crops pasted back (the model's own input size may differ)."""
        return PASTE_SIZE

    def modify(self, crops: Crops, state: FloatArray, years: int) -> Crops:
        """The crops aged: uint8 ``[n, 1024, 1024, 3]`` BGR → the same shape (``state``: each face's rows from the
        processor, ``years``: ``age_modifier.direction``)."""
        raise NotImplementedError

    def _checked(self, output: npt.NDArray[np.generic], count: int) -> FloatArray:
        array = np.asarray(output, np.float32)
        if array.ndim != 4 or array.shape[:2] != (count, 3) or array.shape[2] != array.shape[3]:
            raise ModelError(f"model {self.name} gave {list(array.shape)}; an age model gives [n, 3, S, S]")
        return array


class Fran(AgeModel):
    """fran: each face's crop with its own direction (``state``: :func:`fran_directions`)."""

    def modify(self, crops: Crops, state: FloatArray, years: int) -> Crops:
        tensor = self._format.to_tensor(crops)  # RGB in [0, 1]
        out = np.empty_like(crops)
        for direction in np.unique(state, axis=0):
            members = np.flatnonzero((state == direction).all(axis=1))
            inputs = _fran_inputs(tensor[members], direction.astype(np.float32))
            aged = self._checked(self._outputs(len(members), inputs)[0], len(members))
            out[members] = _resized(self._format.to_crops(aged, (0.0, 1.0)), PASTE_SIZE)
        return out


class StyleganexAge(AgeModel):
    """styleganex_age: every face with one direction (``state``: :func:`styleganex_matrices`)."""

    def modify(self, crops: Crops, state: FloatArray, years: int) -> Crops:
        backgrounds = _resized(crops, _BACKGROUND_SIDE)
        # the face alone, warped from the 384 crop (about the face's own scale: no aliasing) by each face's matrix
        from_background = np.diag([PASTE_SIZE / _BACKGROUND_SIDE, PASTE_SIZE / _BACKGROUND_SIDE, 1.0])
        matrices = [row.reshape(2, 3).astype(np.float64) @ from_background for row in state]
        faces = np.stack(
            [warp_faces(image, [matrix], _FACE_SIDE)[0] for image, matrix in zip(backgrounds, matrices, strict=True)]
        )
        normalisation = self._model.normalisation
        assert normalisation is not None
        face_tensor = crops_to_tensor(faces, normalisation, "rgb")
        background_tensor = crops_to_tensor(backgrounds, normalisation, "rgb")
        strength = np.interp(years, [-100, 100], [_STYLEGANEX_DIRECTION, -_STYLEGANEX_DIRECTION])
        direction = np.array(strength, np.float32)

        def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
            return {
                "target": face_tensor[items],
                "target_with_background": background_tensor[items],
                "direction": direction,
            }

        aged = self._checked(self._outputs(len(crops), inputs)[0], len(crops))
        generated = _resized(self._format.to_crops(aged, (-1.0, 1.0)), PASTE_SIZE)
        return np.stack([match_colour(raw, made) for raw, made in zip(crops, generated, strict=True)])


def _fran_inputs(part: FloatArray, direction: FloatArray) -> Inputs:
    def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
        return {"target": part[items], "direction": direction}

    return inputs


_AGE_MODELS: dict[AgeModifierModel, type[AgeModel]] = {"fran": Fran, "styleganex_age": StyleganexAge}


def _resized(crops: Crops, side: int) -> Crops:
    """Crops area-resized to ``side`` (as they are where they have it already)."""
    if crops.shape[1] == side:
        return crops
    return np.stack([cv2.resize(crop, (side, side), interpolation=cv2.INTER_AREA) for crop in crops])
