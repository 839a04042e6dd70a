"""Paste-back masks beyond the box: occlusion (XSeg), region (BiSeNet face parser) and area (68-point hull),
combined with the box mask by their minimum, as FaceFusion's ``face_masker`` does.

Each mask is float32 ``[M, S, S]`` in 0…1 over the aligned crops of a whole batch of frames: the occluder and the
parser see every face of the batch in one model call (or in batches fitted to memory), never one face at a time.
A model mask is resized back to the crop, then softened as FaceFusion softens it: Gaussian blur (σ 5), and only
what stays above one half is kept, stretched back to 0…1 — so a mask's edge moves inwards, never outwards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError, ModelError
from shared.options import FaceOptions, FaceParser, MaskArea, MaskRegion, MaskType, Occluder
from shared.settings import Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import FittedBatches, Indices, run_in_batches
from workers.engines.loading import LoadedModel, load_model
from workers.faces.alignment import box_mask
from workers.faces.tensors import Crops, crops_to_tensor
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ModelSpec

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
Masks = npt.NDArray[np.float32]
Scalar = TypeVar("Scalar", bound=np.generic)

# The face parser's class index of each region (CelebAMask-HQ labels; FaceFusion's FACE_MASK_REGION_SET).
REGION_CLASSES: Mapping[MaskRegion, int] = MappingProxyType(
    {
        "skin": 1,
        "left-eyebrow": 2,
        "right-eyebrow": 3,
        "left-eye": 4,
        "right-eye": 5,
        "glasses": 6,
        "nose": 10,
        "mouth": 11,
        "upper-lip": 12,
        "lower-lip": 13,
    }
)
PARSER_CLASSES = 19

# The 68-point indices whose convex hull is each area (FaceFusion's face_mask_area_set).
AREA_POINTS: Mapping[MaskArea, tuple[int, ...]] = MappingProxyType(
    {
        "upper-face": (0, 1, 2, 31, 32, 33, 34, 35, 14, 15, 16, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17),
        "lower-face": (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 35, 34, 33, 32, 31, 2),
        "mouth": tuple(range(48, 68)),
    }
)

_SOFTEN_SIGMA = 5.0


def soften(masks: Masks) -> Masks:
    """FaceFusion's softening of a model or hull mask: ``(blur(clip(m, 0, 1), σ 5).clip(0.5, 1) − 0.5) · 2``.

    Where the blurred mask is below one half the result is exactly 0, so nothing outside the hard mask's edge is
    ever taken from the processed crop.
    """
    out = np.empty_like(masks, dtype=np.float32)
    for index, mask in enumerate(masks):
        blurred = cv2.GaussianBlur(np.clip(mask, 0.0, 1.0).astype(np.float32), (0, 0), _SOFTEN_SIGMA)
        out[index] = (np.clip(blurred, 0.5, 1.0) - 0.5) * 2.0
    return out


def _resize_all(images: npt.NDArray[Scalar], size: int) -> npt.NDArray[Scalar]:
    """Resize each of ``images`` ([M, H, W(, C)]) to ``size``² (bilinear, as ``cv2.resize`` defaults)."""
    if images.shape[1] == size and images.shape[2] == size:
        return images
    return np.stack([cv2.resize(image, (size, size)) for image in images]).astype(images.dtype)


def area_masks(landmarks: npt.ArrayLike, areas: Sequence[MaskArea], size: int) -> Masks:
    """The softened convex hull of the 68-point ``areas`` of each face.

    Args:
        landmarks: float [M, 68, 2], each face's 68 points in its crop's pixels.
        areas: which parts of the face the hull covers.
        size: the crop side.

    Returns:
        float32 [M, size, size].
    """
    points = np.asarray(landmarks, np.float64)
    indices = sorted({index for area in areas for index in AREA_POINTS[area]})
    hard = np.zeros((len(points), size, size), np.float32)
    for index, face in enumerate(points):
        hull = cv2.convexHull(face[indices].astype(np.int32))
        cv2.fillConvexPoly(hard[index], hull, 1.0)
    return soften(hard)


class _MaskModel:
    """A mask model loaded through the engine layer, run over a whole batch of crops."""

    def __init__(
        self,
        spec: ModelSpec,
        engine: Engine,
        *,
        fixed_batch: int | None = None,
        batches: FittedBatches | None = None,
        loaded: LoadedModel | None = None,
    ) -> None:
        if spec.input_size is None or spec.normalisation is None or spec.colour_order is None:
            raise ModelError(f"model {spec.name} does not take image crops")
        if spec.input_names[0] not in engine.input_names:
            raise ModelError(f"model {spec.name} has no input {spec.input_names[0]!r}: {engine.input_names}")
        self.spec = spec
        self.engine = engine
        self.size: int = spec.input_size
        self._fixed_batch = fixed_batch
        self.batches = batches or FittedBatches(8)
        self._loaded = loaded

    @classmethod
    def _load_spec(cls, name: str, settings: Settings) -> tuple[ModelSpec, LoadedModel]:
        spec = REGISTRY[name]
        loaded = load_model(resolve(name, settings), settings, name=name, batch_input=spec.input_names[0])
        return spec, loaded

    def degradations(self) -> list[Degradation]:
        """The slower paths the model is on, if it was loaded here."""
        return self._loaded.degradations() if self._loaded is not None else []

    def _run(
        self,
        tensor: npt.NDArray[np.float32],
        reduce: Callable[[npt.NDArray[np.float32]], npt.NDArray[Any]] | None = None,
    ) -> npt.NDArray[Any]:
        """The model's first output for every item of ``tensor``; with ``reduce``, each batch's output is reduced
        as it comes, so only one batch of the raw output is ever held."""
        name = self.spec.input_names[0]

        def run(part: npt.NDArray[np.float32]) -> npt.NDArray[Any]:
            def inputs(items: Indices) -> dict[str, npt.NDArray[np.generic]]:
                return {name: part[items]}

            output = np.asarray(run_in_batches(self.engine, len(part), inputs, self._fixed_batch)[0], np.float32)
            return output if reduce is None else reduce(output)

        return self.batches.map(tensor, run)


class FaceOccluder(_MaskModel):
    """An XSeg occluder: where the face is visible (1) and where something covers it (0).

    XSeg takes NHWC ``[N, 256, 256, 3]`` BGR in 0…1 and returns ``[N, 256, 256, 1]``.
    """

    @classmethod
    def load(cls, name: Occluder, settings: Settings) -> FaceOccluder:
        """Resolve (download if needed) and load occluder ``name``.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec, loaded = cls._load_spec(name, settings)
        return cls(spec, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def masks(self, crops: Crops) -> Masks:
        """The softened occlusion mask of each crop (uint8 ``[M, S, S, 3]`` BGR): float32 ``[M, S, S]``."""
        size = crops.shape[1]
        if len(crops) == 0:
            return np.zeros((0, size, size), np.float32)
        resized = _resize_all(crops, self.size)
        channels = [0, 1, 2] if self.spec.colour_order == "bgr" else [2, 1, 0]
        tensor = np.ascontiguousarray(resized[..., channels].astype(np.float32) / np.float32(255.0))
        output = self._run(tensor)
        hard = np.clip(output.reshape(len(crops), self.size, self.size), 0.0, 1.0)
        return soften(_resize_all(hard, size).astype(np.float32))


class FaceRegionParser(_MaskModel):
    """A BiSeNet face parser: one of 19 classes per pixel; a region mask keeps the chosen classes.

    The parser takes ``[N, 3, 512, 512]`` RGB with ImageNet mean and std and returns ``[N, 19, 512, 512]``.
    """

    @classmethod
    def load(cls, name: FaceParser, settings: Settings) -> FaceRegionParser:
        """Resolve (download if needed) and load face parser ``name``.

        Raises:
            ModelError: the model cannot be found, verified or loaded.
        """
        spec, loaded = cls._load_spec(name, settings)
        return cls(spec, loaded.engine, fixed_batch=loaded.fixed_batch, batches=loaded.batches, loaded=loaded)

    def masks(self, crops: Crops, regions: Sequence[MaskRegion]) -> Masks:
        """The softened mask of ``regions`` over each crop (uint8 ``[M, S, S, 3]`` BGR): float32 ``[M, S, S]``."""
        size = crops.shape[1]
        if len(crops) == 0:
            return np.zeros((0, size, size), np.float32)
        assert self.spec.normalisation is not None and self.spec.colour_order is not None
        tensor = crops_to_tensor(_resize_all(crops, self.size), self.spec.normalisation, self.spec.colour_order)
        classes = np.asarray([REGION_CLASSES[region] for region in regions])

        def chosen(scores: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
            # 19 score planes of 512² are 20 MB a face: each face's planes are reduced to its class map while
            # they are in cache, and a batch's scores are dropped as soon as they are read.
            if scores.ndim != 4 or scores.shape[1] != PARSER_CLASSES:
                raise ModelError(f"face parser {self.spec.name} gave {list(scores.shape)}, not [N, 19, H, W]")
            return np.stack([np.isin(item.argmax(axis=0), classes) for item in scores]).astype(np.uint8)

        hard = self._run(tensor, chosen)
        return soften(_resize_all(hard.astype(np.float32), size).astype(np.float32))


@dataclass
class FaceMasker:
    """The combined paste-back mask of a processor's crops: the minimum of the chosen mask types.

    ``occlusion`` is computed on the crops before processing (what covered the target face still covers it),
    ``region`` on the processed crops (the parser sees the face that is pasted), ``area`` from each face's 68
    points in crop pixels; ``box`` is the feathered rectangle, the same for every crop.
    """

    types: tuple[MaskType, ...]
    box: FloatArray
    occluder: FaceOccluder | None = None
    parser: FaceRegionParser | None = None
    regions: tuple[MaskRegion, ...] = ()
    areas: tuple[MaskArea, ...] = ()

    @classmethod
    def from_options(cls, face: FaceOptions, settings: Settings, size: int) -> FaceMasker:
        """The masker ``face.mask_types`` ask for, loading the occluder and the parser only when needed.

        Raises:
            InvalidOptionsError: no mask type chosen.
            ModelError: a mask model cannot be found, verified or loaded.
        """
        types = tuple(face.mask_types)
        if not types:
            raise InvalidOptionsError("options.face.mask_types needs at least one mask type")
        return cls(
            types,
            box_mask(size, face.mask_blur, face.mask_padding),
            occluder=FaceOccluder.load(face.occluder, settings) if "occlusion" in types else None,
            parser=FaceRegionParser.load(face.parser, settings) if "region" in types else None,
            regions=tuple(face.mask_regions),
            areas=tuple(face.mask_areas),
        )

    @property
    def needs_landmarks(self) -> bool:
        """Whether :meth:`combine` needs each face's 68 points (the ``area`` mask)."""
        return "area" in self.types

    @property
    def box_only(self) -> bool:
        """Whether the mask is the box alone (one shared mask for every crop)."""
        return self.types == ("box",)

    def degradations(self) -> list[Degradation]:
        """The slower paths the mask models are on."""
        return [found for model in (self.occluder, self.parser) if model is not None for found in model.degradations()]

    def before(self, crops: Crops) -> Masks | None:
        """The masks computed on the crops before processing (occlusion), or ``None`` if none is chosen."""
        if self.occluder is None:
            return None
        return self.occluder.masks(crops)

    def combine(
        self, processed: Crops, *, before: Masks | None = None, landmarks: npt.ArrayLike | None = None
    ) -> Masks:
        """The combined mask of each processed crop: float32 ``[M, S, S]``, the minimum over the chosen types.

        Args:
            processed: uint8 ``[M, S, S, 3]`` BGR, the crops to paste.
            before: :meth:`before`'s masks of the same faces.
            landmarks: float ``[M, 68, 2]`` in crop pixels, required for ``area``.

        Raises:
            ValueError: ``area`` is chosen without landmarks, or the box is another size than the crops.
        """
        count, size = len(processed), processed.shape[1]
        if self.box.shape != (size, size):
            raise ValueError(f"the box mask is {list(self.box.shape)} but the crops are {size}²")
        masks: list[Masks] = []
        if "box" in self.types:
            masks.append(np.broadcast_to(self.box, (count, size, size)))
        if before is not None:
            masks.append(before)
        if "area" in self.types:
            if landmarks is None:
                raise ValueError("the area mask needs each face's 68 landmarks")
            masks.append(area_masks(landmarks, self.areas, size))
        if self.parser is not None:
            masks.append(self.parser.masks(processed, self.regions))
        combined = masks[0]
        for mask in masks[1:]:
            combined = np.minimum(combined, mask)
        return np.clip(combined, 0.0, 1.0).astype(np.float32)
