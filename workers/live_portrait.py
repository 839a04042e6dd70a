"""LivePortrait (docs/MODELS.md, LivePortrait): its models, loaded as one crop model, and the keypoint maths that
``expression_restorer`` and ``face_editor`` share.

A face is a 512² aligned crop (at the processor's template). The feature extractor turns it (resized to 256², RGB
/ 255) into an appearance volume [N, 32, 16, 64, 64]; the motion extractor into a head pose (pitch, yaw, roll in
degrees), a scale s, a translation t, an expression e and canonical keypoints c, 21 of them in 3-D. The keypoints
the face shows are K(e) = s·(c·Rᵀ + e) + t, R = Rz(roll)·Ry(yaw)·Rx(pitch) (:func:`keypoints`); the generator
redraws the volume's face with its keypoints moved from ``target`` to ``source``. Every new expression is clipped
to the per-keypoint bounds of :data:`EXPRESSION_MIN`/:data:`EXPRESSION_MAX` (:func:`clip_expression`), a new head
pose to ±30° pitch, ±60° yaw, ±20° roll, each range widened to take the face's own angle (:func:`clip_angles`).
face_editor adds the eye and lip retargeters (a keypoint move that opens or closes the eyes or the lips) and the
stitcher (the edited keypoints fitted back to the original's, so the crop's edges stay where they were).

Every model call takes all the faces it is given at once (in calls of the file's fixed batch where it has one); a
motion extractor whose fixed batch is 1 may give its angles as 0-d tensors, as FaceFusion's code reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from shared.settings import Settings
from workers.engines.base import Degradation, Tensor
from workers.engines.batching import Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.faces.crop_model import CropModel
from workers.faces.tensors import Crops
from workers.models.download import resolve
from workers.models.registry import REGISTRY, UNIT, TemplateName

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
Part = Literal["feature_extractor", "motion_extractor", "generator", "eye_retargeter", "lip_retargeter", "stitcher"]
Retargeter = Literal["eye_retargeter", "lip_retargeter"]
RESTORER_PARTS: tuple[Part, ...] = ("feature_extractor", "motion_extractor", "generator")
EDITOR_PARTS: tuple[Part, ...] = (*RESTORER_PARTS, "eye_retargeter", "lip_retargeter", "stitcher")
CROP = 512  # the aligned crop's side (and the generator's output's)
MODEL_INPUT = 256  # the extractors' input side
KEYPOINTS = 21

# The bounds of every keypoint's expression (x, y, z), FaceFusion's table to 4 significant figures.
EXPRESSION_MIN: FloatArray = np.array(
    [
        [-0.02881, -0.08127, -0.001705], [-0.04886, -0.03322, -0.0001674], [-0.06754, -0.04287, -0.000199],
        [-0.07231, -0.03285, -0.0007313], [-0.03871, -0.06015, -0.0005503], [-0.0638, -0.2238, -0.0007133],
        [-0.03027, -0.03932, -8.241e-6], [-0.02958, -0.05393, -0.0001742], [-0.02924, -0.01531, -6.305e-5],
        [-0.005565, -0.02343, -0.0001269], [-0.04376, -0.02778, -0.02705], [-0.01769, -0.01917, -0.0001151],
        [-0.008343, -0.003998, -3.275e-5], [-0.03402, -0.02819, -0.0001967], [-0.02919, -0.03975, -2.812e-5],
        [-0.01504, -0.02495, -9.426e-5], [-0.01679, -0.0201, -0.0004008], [-0.01864, -0.02485, -0.02744],
        [-0.004612, -0.01217, -0.0002932], [-0.041, -0.07438, -0.04428], [-0.01904, -0.03744, -0.01347],
    ],
    np.float32,
)  # fmt: skip
EXPRESSION_MAX: FloatArray = np.array(
    [
        [0.04467, 0.07088, 0.0004083], [0.02143, 0.06159, 4.853e-5], [0.03024, 0.0445, 1.283e-5],
        [0.03059, 0.03798, 0.000657], [0.04457, 0.03973, 0.000711], [0.09437, 0.09859, 0.0002026],
        [0.01611, 0.02929, 3.447e-6], [0.05238, 0.1071, 0.0006615], [0.002857, 0.008323, 0.0002393],
        [0.02579, 0.01609, 2.419e-5], [0.04908, 0.03439, 0.03224], [0.01448, 0.03392, 0.0001423],
        [0.0008757, 0.006822, 2.761e-5], [0.0187, 0.0384, 7.331e-5], [0.02017, 0.04905, 2.34e-5],
        [0.02465, 0.03292, 3.486e-5], [0.02225, 0.01218, 0.0001564], [0.01721, 0.03016, 0.01366],
        [0.01835, 0.01611, 0.0002874], [0.03576, 0.1806, 0.02756], [0.02175, 0.08668, 0.03342],
    ],
    np.float32,
)  # fmt: skip
# The widest head pose an edit may give (pitch, yaw, roll in degrees), unless the face's own is wider.
HEAD_LIMITS: FloatArray = np.array([30.0, 60.0, 20.0], np.float32)


def rotation(angles: npt.ArrayLike) -> FloatArray:
    """Rotation matrices of head poses: ``angles`` [N, 3] (pitch, yaw, roll in degrees) → [N, 3, 3], each
    Rz(roll)·Ry(yaw)·Rx(pitch) (scipy's ``from_euler("xyz", …)``, as FaceFusion builds it)."""
    pitch, yaw, roll = np.radians(np.asarray(angles, np.float64).reshape(-1, 3)).T
    zero, one = np.zeros_like(pitch), np.ones_like(pitch)

    def matrices(*rows: tuple[npt.NDArray[np.float64], ...]) -> npt.NDArray[np.float64]:
        return np.stack([np.stack(row, axis=-1) for row in rows], axis=-2)

    cp, sp, cy, sy, cr, sr = np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw), np.cos(roll), np.sin(roll)
    about_x = matrices((one, zero, zero), (zero, cp, -sp), (zero, sp, cp))
    about_y = matrices((cy, zero, sy), (zero, one, zero), (-sy, zero, cy))
    about_z = matrices((cr, -sr, zero), (sr, cr, zero), (zero, zero, one))
    return (about_z @ about_y @ about_x).astype(np.float32)


def clip_expression(expression: npt.ArrayLike) -> FloatArray:
    """``expression`` [N, 21, 3] clipped to every keypoint's bounds."""
    return np.clip(np.asarray(expression, np.float32), EXPRESSION_MIN, EXPRESSION_MAX)


def clip_angles(angles: npt.ArrayLike, original: npt.ArrayLike) -> FloatArray:
    """Edited head poses [N, 3] clipped to :data:`HEAD_LIMITS`, each range widened to include the face's
    ``original`` angle (a face turned 70° may stay turned 70°, not further)."""
    own = np.asarray(original, np.float32).reshape(-1, 3)
    low, high = np.minimum(own, -HEAD_LIMITS), np.maximum(own, HEAD_LIMITS)
    return np.clip(np.asarray(angles, np.float32).reshape(-1, 3), low, high)


@dataclass(frozen=True)
class Motion:
    """What the motion extractor finds in N faces.

    Attributes:
        angles: float32 [N, 3], pitch, yaw, roll in degrees.
        scale: float32 [N, 1].
        translation: float32 [N, 3].
        expression: float32 [N, 21, 3].
        canonical: float32 [N, 21, 3], the keypoints before pose and expression.
    """

    angles: FloatArray
    scale: FloatArray
    translation: FloatArray
    expression: FloatArray
    canonical: FloatArray

    def __len__(self) -> int:
        return len(self.angles)

    def keypoints(self, expression: FloatArray | None = None, angles: FloatArray | None = None) -> FloatArray:
        """K = s·(c·Rᵀ + e) + t [N, 21, 3], with the face's own expression and pose unless others are given."""
        turned = self.canonical @ rotation(self.angles if angles is None else angles).transpose(0, 2, 1)
        moved = turned + (self.expression if expression is None else expression)
        return np.asarray(self.scale[:, :, None] * moved + self.translation[:, None, :], np.float32)

    def take(self, items: slice) -> Motion:
        """The faces at ``items``."""
        return Motion(*(np.asarray(field[items]) for field in self._fields()))

    def _fields(self) -> tuple[FloatArray, ...]:
        return self.angles, self.scale, self.translation, self.expression, self.canonical


class LivePortrait(CropModel):
    """LivePortrait's models, loaded: to the crop-and-paste template, one model of 512² crops at ``template``
    (RGB in [0, 1]) whose batches are the generator's, the heaviest.

    Build it with :meth:`load`. Example::

        portrait = LivePortrait.load("arcface_128", RESTORER_PARTS, settings)
        motion = portrait.motion(portrait.prepare(crops))
        faces = portrait.generate(portrait.features(portrait.prepare(crops)), motion.keypoints(e), motion.keypoints())
    """

    def __init__(self, template: TemplateName, models: Mapping[Part, LoadedModel]) -> None:
        generator = models["generator"]
        spec = replace(
            REGISTRY["live_portrait_generator"], input_size=CROP, template=template, normalisation=UNIT,
            colour_order="rgb",
        )  # fmt: skip
        super().__init__(
            spec, generator.engine, inputs=spec.input_names, fixed_batch=generator.fixed_batch,
            batches=generator.batches, loaded=generator,
        )  # fmt: skip
        self.models = dict(models)

    @classmethod
    def load(cls, template: TemplateName, parts: Collection[Part], settings: Settings) -> LivePortrait:
        """Resolve (download if needed) and load ``parts``, each on the engine chosen for it.

        Raises:
            ModelError: a model cannot be found, verified or loaded.
        """
        models: dict[Part, LoadedModel] = {}
        for part in parts:
            spec = REGISTRY[f"live_portrait_{part}"]
            path = resolve(spec.name, settings)
            models[part] = load_model(path, settings, name=spec.name, batch_input=spec.input_names[0])
        return cls(template, models)

    def degradations(self) -> list[Degradation]:
        """The slower paths any of its models is on."""
        return [found for model in self.models.values() for found in model.degradations()]

    @staticmethod
    def prepare(crops: Crops) -> FloatArray:
        """512² BGR crops → the extractors' input [N, 3, 256, 256], RGB / 255 (resized by pixel area)."""
        small = np.empty((len(crops), MODEL_INPUT, MODEL_INPUT, 3), np.uint8)
        for index, crop in enumerate(crops):
            cv2.resize(crop, (MODEL_INPUT, MODEL_INPUT), dst=small[index], interpolation=cv2.INTER_AREA)
        return np.ascontiguousarray(small[..., ::-1].transpose(0, 3, 1, 2), np.float32) / np.float32(255.0)

    def features(self, tensor: FloatArray) -> FloatArray:
        """The appearance volumes [N, 32, 16, 64, 64] of prepared crops."""
        (volume,) = self._run("feature_extractor", len(tensor), lambda items: {"input": tensor[items]})[:1]
        return volume

    def motion(self, tensor: FloatArray) -> Motion:
        """The head pose, scale, translation, expression and canonical keypoints of prepared crops."""
        count = len(tensor)
        pitch, yaw, roll, scale, shift, expression, canonical = self._run(
            "motion_extractor", count, lambda items: {"input": tensor[items]}
        )[:7]
        angles = np.stack([a.reshape(count) for a in (pitch, yaw, roll)], axis=1)
        points = (count, KEYPOINTS, 3)
        return Motion(
            angles, scale.reshape(count, 1), shift.reshape(count, 3), expression.reshape(points),
            canonical.reshape(points),
        )  # fmt: skip

    def generate(self, volume: FloatArray, source: FloatArray, target: FloatArray) -> Crops:
        """The faces of ``volume`` redrawn with their keypoints moved from ``target`` to ``source`` [N, 21, 3]: BGR
        uint8 crops [N, 512, 512, 3] (the model's RGB in [0, 1], clipped and rounded)."""

        def inputs(items: Indices) -> dict[str, Tensor]:
            return {"feature_volume": volume[items], "source": source[items], "target": target[items]}

        (image,) = self._run("generator", len(volume), inputs)[:1]
        pixels = np.clip(image.transpose(0, 2, 3, 1), 0.0, 1.0) * 255.0 + 0.5
        return np.ascontiguousarray(pixels.astype(np.uint8)[..., ::-1])

    def retarget(self, part: Retargeter, features: FloatArray) -> FloatArray:
        """The keypoint move [N, 21, 3] the eye or lip retargeter gives for ``features`` [N, 66] or [N, 65]."""
        (move,) = self._run(part, len(features), lambda items: {"input": features[items]})[:1]
        return move.reshape(len(features), KEYPOINTS, 3)

    def stitch(self, source: FloatArray, target: FloatArray) -> FloatArray:
        """The edited keypoints ``source`` fitted to the original ``target`` by the stitcher: [N, 21, 3]."""
        (points,) = self._run(
            "stitcher", len(source), lambda items: {"source": source[items], "target": target[items]}
        )[:1]
        return points.reshape(len(source), KEYPOINTS, 3)

    def _run(self, part: Part, count: int, inputs: Callable[[Indices], Mapping[str, Tensor]]) -> list[FloatArray]:
        """``count`` items through model ``part``, all in one call where its batch is dynamic; float32 outputs with
        the batch leading (a fixed batch of 1 may give a 0-d output)."""
        model = self.models[part]

        def run(feeds: Mapping[str, Tensor]) -> list[Tensor]:
            return [np.asarray(o, np.float32).reshape(1) if np.ndim(o) == 0 else o for o in model.engine.run(feeds)]

        outputs = run_in_batches(model.engine, count, inputs, model.fixed_batch, run=run)
        return [np.asarray(output, np.float32) for output in outputs]
