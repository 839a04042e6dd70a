"""The template of processors that crop faces, transform them and paste them back (the swapper, the enhancer).

Per batch of frames: detect (one detector call per frame, shared with the rest of the chain), select the targeted
faces, align every one of them of the whole batch onto the model's template (:func:`gather_crops`), transform the
crops in batches fitted to memory (the subclass's :meth:`CropPasteProcessor.transform`), and paste them back with
a feathered box mask — three stages the render pipeline overlaps (:meth:`CropPasteProcessor.stages`).

This module holds no processor of its own; each subclass lives in the module of its processor name.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from workers.engines.batching import FittedBatches
from workers.faces.alignment import box_mask
from workers.faces.crop_model import CropModel
from workers.faces.cropping import FaceCrops, gather_crops, paste_crops
from workers.faces.detection import FaceDetector
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


class CropPasteProcessor:
    """Transforms the targeted faces of each batch of frames with one model of aligned crops.

    Args:
        model: the model whose template and crop size the faces are aligned to.
        targeter: picks the faces to transform.
        batch_size: faces per model call, unless ``batches`` is given.
        batches: faces per model call fitted to the device's memory, halved on out-of-memory.
        mask_blur, mask_padding: the paste-back box mask (:func:`workers.faces.alignment.box_mask`).
        mask_scale: how much of the transformed face shows where the mask is full (0–1).
        reporter: reports the model's slower paths after each batch.
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
    ) -> None:
        self._model = model
        self.targeter: FaceTargeter | None = targeter
        self.detector: FaceDetector = targeter.detector
        self._reporter = reporter
        self.batches = batches or FittedBatches(batch_size)
        mask = box_mask(model.size, mask_blur, mask_padding)
        self.mask: FloatArray = mask if mask_scale == 1.0 else mask * np.float32(mask_scale)

    def transform(self, crops: Crops) -> Crops:
        """The crops transformed by the model: same shape, same order."""
        raise NotImplementedError

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every targeted face transformed."""
        faces = self.detector.detect(frames)
        work = Work(frames, faces, self.targeter.select(frames, faces) if self.targeter else faces)
        for stage in self.stages():
            work = stage(work)
        return work.frames

    def stages(self) -> tuple[Stage, ...]:
        """Align the targeted faces, transform them, paste them back (after the chain's detection)."""
        return self._align, self._transform, self._paste

    def _align(self, work: Work) -> Work:
        assert work.targets is not None
        work.state = gather_crops(work.frames, work.targets, self._model.template, self._model.size)
        return work

    def _transform(self, work: Work) -> Work:
        faces = work.state
        assert isinstance(faces, FaceCrops)
        if len(faces):
            work.state = faces, self.batches.map(faces.crops, self.transform)
            logger.debug("%s %s faces in %s frames", self.verb, len(faces), len(work.frames))
        if self._reporter is not None:
            self._reporter.check()
        return work

    def _paste(self, work: Work) -> Work:
        if isinstance(work.state, tuple):
            faces, transformed = work.state
            work.frames = paste_crops(work.frames, faces, transformed, self.mask)
        work.state = None
        return work


def common_arguments(context: ProcessorContext, model: CropModel) -> dict[str, Any]:
    """The arguments every crop-and-paste processor takes from a job's context."""
    face = context.options.face
    return {
        "batch_size": context.settings.batch_size,
        "batches": model.batches,
        "mask_blur": face.mask_blur,
        "mask_padding": face.mask_padding,
        "reporter": Reporter(context.report, model.degradations),
    }
