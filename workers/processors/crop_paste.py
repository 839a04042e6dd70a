"""The template of processors that crop faces, transform them and paste them back (the swapper, the enhancer).

Per batch of frames: detect (one detector call per frame, shared with the rest of the chain), select the targeted
faces, align every one of them of the whole batch onto the model's template at the crop size (by 68-point
landmarks where a landmarker is given, :mod:`workers.faces.landmarks`), transform the crops in batches fitted to
memory (the subclass's :meth:`CropPasteProcessor.transform`, with the per-face state its
:meth:`CropPasteProcessor.face_state` computed while aligning), and paste them back through the paste-back masks
(:class:`~workers.faces.masking.FaceMasker`: box, occlusion, region, area, combined by their minimum) — three
stages the render pipeline overlaps (:meth:`CropPasteProcessor.stages`). The crops are cut and pasted back on the
batch's frame back-end (:mod:`workers.frames`: the host's OpenCV warps, or torch's where the frames are on a
device); the transforms, the models and the masks are the host's.

This module holds no processor of its own; each subclass lives in the module of its processor name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from shared.options import MaskType
from workers.engines.base import Degradation
from workers.engines.batching import FittedBatches
from workers.faces.alignment import box_mask
from workers.faces.crop_model import CropModel
from workers.faces.cropping import FaceCrops, face_transforms
from workers.faces.detection import Face, FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.faces.masking import FaceMasker, Masks
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Aligned:
    """What the align stage hands the transform stage.

    Attributes:
        faces: the aligned crops.
        landmarks: each face's 68 points in crop pixels (for the area mask), ``None`` without a landmarker.
        state: the subclass's per-face state (:meth:`CropPasteProcessor.face_state`), one row per face.
    """

    faces: FaceCrops
    landmarks: FloatArray | None = None
    state: FloatArray | None = None


@dataclass(frozen=True)
class Transformed:
    """What the transform stage hands the paste stage: the crops, the transformed crops and their masks."""

    faces: FaceCrops
    transformed: Crops
    masks: Masks


class CropPasteProcessor:
    """Transforms the targeted faces of each batch of frames with one model of aligned crops.

    Args:
        model: the model whose template the faces are aligned to.
        targeter: picks the faces to transform.
        batch_size: faces per model call, unless ``batches`` is given.
        batches: faces per model call fitted to the device's memory, halved on out-of-memory.
        mask_blur, mask_padding: the paste-back box mask (:func:`workers.faces.alignment.box_mask`).
        mask_scale: how much of the transformed face shows where the mask is full (0–1).
        reporter: reports the models' slower paths after each batch.
        crop_size: the side of the crops (pixel boost: a multiple of the model's size); ``None``: its size.
        masker: the paste-back masks beyond the box (``None``, or the box alone: the box).
        landmarker: 68-point landmarks, for the area mask and the refined alignment.
    """

    touches_pixels = True
    verb = "transformed"
    """What :meth:`transform` does, for the debug log."""

    def __init__(
        self,
        model: CropModel,
        targeter: FaceTargeter,
        *,
        batch_size: int = 8,
        batches: FittedBatches | None = None,
        mask_blur: float = 0.3,
        mask_padding: Sequence[int] = (0, 0, 0, 0),
        mask_scale: float = 1.0,
        reporter: Reporter | None = None,
        crop_size: int | None = None,
        masker: FaceMasker | None = None,
        landmarker: FaceLandmarker | None = None,
    ) -> None:
        self._model = model
        self.targeter: FaceTargeter | None = targeter
        self.detector: FaceDetector = targeter.detector
        self._reporter = reporter
        self.batches = batches or FittedBatches(batch_size)
        self.crop_size = crop_size or model.size
        self.masker = masker if masker is not None and not masker.box_only else None
        self.landmarker = landmarker
        self.mask_scale = mask_scale
        mask = box_mask(self.crop_size, mask_blur, mask_padding)
        self.mask: FloatArray = mask if mask_scale == 1.0 else mask * np.float32(mask_scale)
        self._processed = 0  # frames :meth:`process` has been given (the next batch's first frame's number)

    @property
    def template(self) -> str:
        """The alignment template of the model's crops."""
        return self._model.template

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops transformed by the model: same order (``state``: the rows of :meth:`face_state` for them)."""
        raise NotImplementedError

    def transform_with_masks(self, crops: Crops, state: FloatArray | None = None) -> tuple[Crops, Masks | None]:
        """:meth:`transform`, and the model's own paste-back masks of the transformed crops where it gives them
        (float32 ``[n, S, S]``, combined with the job's masks by their minimum, as FaceFusion combines a deep swap
        model's masks); ``None`` (the default): the model gives none."""
        return self.transform(crops, state), None

    def face_state(self, frames: FrameBatch, targets: Sequence[Sequence[Face]]) -> FloatArray | None:
        """Per-face state for :meth:`transform`, one row per aligned face in order; ``None``: none (the default)."""
        return None

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every targeted face transformed (the chunk's batches, in order: they are numbered so)."""
        faces = self.detector.detect(frames)
        work = Work(frames, faces, self.targeter.select(frames, faces) if self.targeter else faces)
        work.first, self._processed = self._processed, self._processed + len(frames)
        for stage in self.stages():
            work = stage(work)
        return work.frames

    def stages(self) -> tuple[Stage, ...]:
        """Align the targeted faces, transform them, paste them back (after the chain's detection)."""
        return self._align, self._transform, self._paste

    def _align(self, work: Work) -> Work:
        targets, points = self.refine(work)
        transforms, frame_of = face_transforms(targets, self._model.template, self.crop_size)
        backend, frames = work.on_backend()
        faces = FaceCrops(backend.crops(frames, transforms, frame_of, self.crop_size), transforms, frame_of)
        work.state = self.aligned(work, faces, targets, points)
        return work

    def refine(self, work: Work) -> tuple[Sequence[Sequence[Face]], list[npt.NDArray[np.float32]] | None]:
        """The batch's targets, aligned by their 68-point landmarks where the landmarker trusts them, and those 68
        points per face (in frame pixels; ``None`` without a landmarker)."""
        assert work.targets is not None
        if self.landmarker is None:
            return work.targets, None
        found = self.landmarker.landmarks(work.frames, work.targets)
        return found.faces, found.points

    def aligned(
        self,
        work: Work,
        faces: FaceCrops,
        targets: Sequence[Sequence[Face]],
        points: Sequence[npt.NDArray[np.float32]] | None,
    ) -> Aligned:
        """The transform stage's input: ``faces`` (cropped from ``targets``), their 68 points in crop pixels and
        the processor's per-face state."""
        landmarks = None
        if points is not None and len(faces):
            landmarks = np.stack(
                [p.astype(np.float64) @ m[:, :2].T + m[:, 2] for p, m in zip(points, faces.transforms, strict=True)]
            ).astype(np.float32)
        state = self.face_state(work.frames, targets) if len(faces) else None
        return Aligned(faces, landmarks, state)

    def _transform(self, work: Work) -> Work:
        aligned = work.state
        assert isinstance(aligned, Aligned)
        faces = aligned.faces
        if len(faces):
            before = self.masker.before(faces.crops) if self.masker is not None else None
            state, done, own = aligned.state, [0], list[Masks]()

            def step(part: Crops) -> Crops:
                # map hands consecutive slices in order (a slice that ran out of memory comes again, smaller)
                start = done[0]
                rows = None if state is None else state[start : start + len(part)]
                result, masks = self.transform_with_masks(part, rows)
                if masks is not None:
                    own.append(masks)
                done[0] = start + len(part)
                return result

            transformed = self.batches.map(faces.crops, step)
            masks = self.mask
            if self.masker is not None and transformed.shape[1] == faces.crops.shape[1]:
                masks = self.masker.combine(transformed, before=before, landmarks=aligned.landmarks)
                if self.mask_scale != 1.0:
                    masks = masks * np.float32(self.mask_scale)
            if own:
                masks = np.minimum(masks, np.concatenate(own))
            work.state = Transformed(faces, transformed, masks)
            logger.debug("%s %s faces in %s frames", self.verb, len(faces), len(work.frames))
        if self._reporter is not None:
            self._reporter.check()
        return work

    def _paste(self, work: Work) -> Work:
        """The transformed crops blended back through their masks (crops larger than those gathered, an
        enhancer's, by transforms scaled to match)."""
        if isinstance(work.state, Transformed):
            done = work.state
            if len(done.transformed) != len(done.faces):
                raise ValueError(f"{len(done.transformed)} crops for {len(done.faces)} faces")
            backend, frames = work.on_backend()
            scale = done.transformed.shape[1] / done.faces.crops.shape[1]
            faces = done.faces
            backend.paste(frames, done.transformed, faces.transforms * scale, faces.frame_indices, done.masks)
        work.state = None
        return work


def common_arguments(
    context: ProcessorContext,
    model: CropModel,
    *,
    crop_size: int | None = None,
    mask_types: Collection[MaskType] | None = None,
    landmarks: bool | Literal["always"] = True,
    more: Sequence[Callable[[], list[Degradation]]] = (),
) -> dict[str, Any]:
    """The arguments every crop-and-paste processor takes from a job's context: batching, the paste-back masks
    (``face.mask_types``, or ``mask_types`` where the processor takes only some), the landmarker where the area
    mask or ``face.landmarker_score`` asks for it (unless ``landmarks`` is false; ``"always"``: the processor reads
    the 68 points itself), and the reporter of them all (and of ``more``: the slower paths of the processor's other
    models).

    Raises:
        InvalidOptionsError: no mask type chosen.
        ModelError: a mask or landmark model cannot be found or downloaded.
    """
    face = context.options.face
    settings = context.settings
    size = crop_size or model.size
    masked = face if mask_types is None else face.model_copy(update={"mask_types": list(mask_types)})
    masker = FaceMasker.from_options(masked, settings, size)
    landmarker = (
        FaceLandmarker.load(settings, min_score=face.landmarker_score)
        if landmarks == "always" or (landmarks and (masker.needs_landmarks or face.landmarker_score > 0))
        else None
    )
    sources = [model.degradations, masker.degradations, *more] + ([landmarker.degradations] if landmarker else [])
    return {
        "batch_size": settings.batch_size,
        "batches": model.batches,
        "mask_blur": face.mask_blur,
        "mask_padding": face.mask_padding,
        "reporter": Reporter(context.report, *sources),
        "crop_size": size,
        "masker": masker,
        "landmarker": landmarker,
    }
