"""Face order and attribute filters, as FaceFusion's ``face_selector_order`` / gender / age options work.

Faces are put in ``face.selector_order`` (``one`` then takes the first), and — when a gender or an age range is
asked for — classified by FairFace, every face of a batch of frames in one model call, and kept when the gender
matches and the predicted age bracket overlaps the range.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from shared.options import Gender, SelectorOrder
from shared.settings import Settings
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches, Indices
from workers.engines.loading import LoadedModel
from workers.faces.crop_model import CropModel, load_heavy
from workers.faces.cropping import gather_crops
from workers.faces.detection import Face
from workers.models.registry import REGISTRY, ModelSpec

logger = logging.getLogger(__name__)

Frames = npt.NDArray[np.uint8]

GENDERS: tuple[Gender, ...] = ("male", "female")
# FairFace's nine age brackets, as inclusive (first, last) years (FaceFusion's categorize_age).
AGE_BRACKETS: tuple[tuple[int, int], ...] = (
    (0, 2),
    (3, 9),
    (10, 19),
    (20, 29),
    (30, 39),
    (40, 49),
    (50, 59),
    (60, 69),
    (70, 100),
)


def _centre(face: Face) -> tuple[float, float]:
    return float(face.box[0] + face.box[2]) / 2, float(face.box[1] + face.box[3]) / 2


_ORDER_KEYS: Mapping[SelectorOrder, Callable[[Face], float]] = MappingProxyType(
    {
        "left-right": lambda face: float(face.box[0]),
        "right-left": lambda face: -float(face.box[0]),
        "top-bottom": lambda face: float(face.box[1]),
        "bottom-top": lambda face: -float(face.box[1]),
        "small-large": lambda face: face.area,
        "large-small": lambda face: -face.area,
        "best-worst": lambda face: -face.score,
        "worst-best": lambda face: face.score,
    }
)


def order_faces(faces: Sequence[Face], order: SelectorOrder) -> list[Face]:
    """``faces`` in ``order`` (stable: ties keep the detector's order)."""
    return sorted(faces, key=_ORDER_KEYS[order])


@dataclass(frozen=True)
class FaceAttributes:
    """What FairFace sees in a face: its gender and age bracket (inclusive years)."""

    gender: Gender
    age: tuple[int, int]


class FaceClassifier(CropModel):
    """FairFace over every face of a batch of frames in one model call (or in batches fitted to memory)."""

    def __init__(
        self,
        spec: ModelSpec,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        super().__init__(
            spec,
            engine,
            inputs=spec.input_names[:1],
            fixed_batch=fixed_batch,
            batches=batches or FittedBatches(32),
            loaded=loaded,
        )

    @classmethod
    def load(cls, settings: Settings) -> FaceClassifier:
        """Resolve (download if needed) and load FairFace.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec = REGISTRY["fairface"]
        _, loaded = load_heavy(spec, settings, batch_input=spec.input_names[0])
        return cls(spec, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def classify(
        self, frames: Frames | Sequence[Frames], faces_per_frame: Sequence[Sequence[Face]]
    ) -> list[list[FaceAttributes]]:
        """The attributes of every listed face of every frame, one list per frame."""
        crops = gather_crops(frames, faces_per_frame, self._format.template, self._format.size)
        found: list[FaceAttributes] = []
        if len(crops):
            tensor = self._format.to_tensor(crops.crops)
            name = self._model.input_names[0]
            batches = self.batches
            assert batches is not None

            def run(part: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
                def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
                    return {name: part[items]}

                outputs = self._outputs(len(part), inputs)
                return np.stack([np.asarray(o).reshape(len(part)) for o in outputs[1:3]], axis=1).astype(np.float32)

            ids = batches.map(tensor, run).astype(np.int64)
            found = [
                FaceAttributes(GENDERS[int(gender) % 2], AGE_BRACKETS[int(np.clip(age, 0, len(AGE_BRACKETS) - 1))])
                for gender, age in ids
            ]
        result: list[list[FaceAttributes]] = []
        start = 0
        for faces in faces_per_frame:
            result.append(found[start : start + len(faces)])
            start += len(faces)
        return result


@dataclass
class AttributeFilter:
    """Keeps the faces of the asked gender whose age bracket overlaps ``[age_start, age_end]``."""

    classifier: FaceClassifier
    gender: Gender | None = None
    age_start: int = 0
    age_end: int = 100

    def keeps(self, attributes: FaceAttributes) -> bool:
        if self.gender is not None and attributes.gender != self.gender:
            return False
        first, last = attributes.age
        return first <= self.age_end and last >= self.age_start

    def filter(self, frames: Frames | Sequence[Frames], faces_per_frame: Sequence[Sequence[Face]]) -> list[list[Face]]:
        """The faces of each frame that pass, in their order."""
        classified = self.classifier.classify(frames, faces_per_frame)
        return [
            [face for face, attributes in zip(faces, found, strict=True) if self.keeps(attributes)]
            for faces, found in zip(faces_per_frame, classified, strict=True)
        ]
