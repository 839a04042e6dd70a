"""``face_enhancer``: restores the selected faces of every frame with a face-restoration model.

Per batch of frames: detect (shared with the rest of the chain: after a swapper, the faces found on the decoded
frames), select, align every selected face of the whole batch onto the enhancer's template, enhance them in
batches fitted to memory, and paste them back — stages the render pipeline overlaps (:meth:`stages`).
``enhancer_blend`` (0–100) is how much of the enhanced face shows, as FaceFusion's ``face_enhancer_blend``:
it scales the paste-back mask — the feathered box, and the occlusion mask where ``face.mask_types`` asks for it
(FaceFusion's enhancer takes those two of the mask types).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError
from workers.engines.batching import FittedBatches
from workers.faces.alignment import box_mask
from workers.faces.cropping import FaceCrops, gather_crops, paste_crops
from workers.faces.detection import FaceDetector
from workers.faces.enhancing import FaceEnhancer
from workers.faces.masking import FaceMasker
from workers.faces.recognition import FaceEmbedder
from workers.faces.targeting import FaceTargeter
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work, register

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


class FaceEnhancerProcessor:
    """Enhances the targeted faces of each batch of frames.

    Args:
        enhancer: the restoration model.
        targeter: picks the faces to enhance.
        weight: the model's fidelity weight (CodeFormer's ``w``; other models ignore it).
        blend: 0–100, the share of the enhanced face in the result.
        batch_size: faces per enhancer call, unless ``batches`` is given.
        batches: faces per enhancer call fitted to the device's memory, halved on out-of-memory.
        mask_blur, mask_padding: the paste-back box mask (:func:`workers.faces.alignment.box_mask`).
    """

    touches_pixels = True

    def __init__(
        self,
        enhancer: FaceEnhancer,
        targeter: FaceTargeter,
        *,
        weight: float = 0.5,
        blend: int = 80,
        batch_size: int = 8,
        batches: FittedBatches | None = None,
        mask_blur: float = 0.3,
        mask_padding: Sequence[int] = (0, 0, 0, 0),
        reporter: Reporter | None = None,
        masker: FaceMasker | None = None,
    ) -> None:
        self.enhancer = enhancer
        self.masker = masker if masker is not None and masker.occluder is not None else None
        self.blend = np.float32(blend / 100)
        self.targeter: FaceTargeter | None = targeter
        self.detector = targeter.detector
        self._reporter = reporter
        self.weight = weight
        self.batches = batches or FittedBatches(batch_size)
        self.mask: FloatArray = box_mask(enhancer.size, mask_blur, mask_padding) * np.float32(blend / 100)

    @classmethod
    def from_context(
        cls,
        context: ProcessorContext,
        *,
        detector: FaceDetector | None = None,
        embedder: FaceEmbedder | None = None,
        enhancer: FaceEnhancer | None = None,
    ) -> FaceEnhancerProcessor:
        """Build from a job's context, loading through the model registry every model not given.

        Raises:
            InvalidOptionsError: no enhancer model chosen, or reference mode without a source image.
            ModelError: a model cannot be found or downloaded.
        """
        face = context.options.face
        settings = context.settings
        if enhancer is None:
            if face.enhancer is None:
                raise InvalidOptionsError("face_enhancer needs an enhancer model (options.face.enhancer)")
            enhancer = FaceEnhancer.load(face.enhancer, settings)
        types = tuple(kind for kind in face.mask_types if kind in ("box", "occlusion")) or ("box",)
        masker = FaceMasker.from_options(face.model_copy(update={"mask_types": list(types)}), settings, enhancer.size)
        targeter = FaceTargeter.load(face, context.sources, settings, detector=detector, embedder=embedder)
        return cls(
            enhancer,
            targeter,
            weight=face.codeformer_weight,
            blend=face.enhancer_blend,
            batch_size=settings.batch_size,
            batches=enhancer.batches,
            mask_blur=face.mask_blur,
            mask_padding=face.mask_padding,
            reporter=Reporter(context.report, enhancer.degradations, masker.degradations),
            masker=masker,
        )

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every targeted face enhanced."""
        faces = self.detector.detect(frames)
        work = Work(frames, faces, self.targeter.select(frames, faces) if self.targeter else faces)
        for stage in self.stages():
            work = stage(work)
        return work.frames

    def stages(self) -> tuple[Stage, ...]:
        """Align the targeted faces, enhance them, paste them back (after the chain's detection)."""
        return self._align, self._enhance, self._paste

    def _align(self, work: Work) -> Work:
        assert work.targets is not None
        work.state = gather_crops(work.frames, work.targets, self.enhancer.template, self.enhancer.size)
        return work

    def _enhance(self, work: Work) -> Work:
        faces = work.state
        assert isinstance(faces, FaceCrops)
        if len(faces):
            enhanced = self.batches.map(faces.crops, lambda crops: self.enhancer.enhance(crops, self.weight))
            masks = (
                self.masker.combine(enhanced, before=self.masker.before(faces.crops)) * self.blend
                if self.masker is not None and enhanced.shape[1] == faces.crops.shape[1]
                else self.mask
            )
            work.state = faces, enhanced, masks
            logger.debug("enhanced %s faces in %s frames", len(faces), len(work.frames))
        if self._reporter is not None:
            self._reporter.check()
        return work

    def _paste(self, work: Work) -> Work:
        if isinstance(work.state, tuple):
            faces, enhanced, masks = work.state
            work.frames = paste_crops(work.frames, faces, enhanced, masks)
        work.state = None
        return work


@register("face_enhancer")
def _build(context: ProcessorContext) -> FaceEnhancerProcessor:
    return FaceEnhancerProcessor.from_context(context)
