"""``face_swapper``: puts the source identity on the selected faces of every frame.

Per batch of frames: detect (one detector call per frame, shared with the rest of the chain), select, align every
selected face of the whole batch onto the swapper's template, swap them in batches fitted to memory, and paste
them back with a feathered box mask — three stages the render pipeline overlaps (:meth:`stages`). The source
identity is computed once, when the processor is built (see
:mod:`workers.faces.targeting` for which source images count as identity and which as reference).
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
from workers.faces.recognition import FaceEmbedder, source_identity
from workers.faces.swapping import FaceSwapper, Latent
from workers.faces.targeting import FaceTargeter, identity_sources
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work, register

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


class FaceSwapperProcessor:
    """Swaps the targeted faces of each batch of frames to one identity.

    Args:
        swapper: the swap model.
        targeter: picks the faces to swap.
        identity: the source identity, a unit ArcFace embedding [512] (:func:`source_identity`).
        batch_size: faces per swapper call, unless ``batches`` is given.
        batches: faces per swapper call fitted to the device's memory, halved on out-of-memory.
        mask_blur, mask_padding: the paste-back box mask (:func:`workers.faces.alignment.box_mask`).
    """

    touches_pixels = True

    def __init__(
        self,
        swapper: FaceSwapper,
        targeter: FaceTargeter,
        identity: FloatArray,
        *,
        batch_size: int = 8,
        batches: FittedBatches | None = None,
        mask_blur: float = 0.3,
        mask_padding: Sequence[int] = (0, 0, 0, 0),
        reporter: Reporter | None = None,
    ) -> None:
        self.swapper = swapper
        self.targeter: FaceTargeter | None = targeter
        self.detector = targeter.detector
        self._reporter = reporter
        self.batches = batches or FittedBatches(batch_size)
        self.latent: Latent = swapper.source_latent(np.asarray(identity, dtype=np.float32).reshape(1, -1))
        self.mask = box_mask(swapper.size, mask_blur, mask_padding)

    @classmethod
    def from_context(
        cls,
        context: ProcessorContext,
        *,
        detector: FaceDetector | None = None,
        embedder: FaceEmbedder | None = None,
        swapper: FaceSwapper | None = None,
    ) -> FaceSwapperProcessor:
        """Build from a job's context, loading through the model registry every model not given.

        Raises:
            InvalidOptionsError: no swapper model chosen, or no source image.
            SourceImageError, NoFaceInSourceError: a source image is unreadable or shows no face.
            ModelError: a model cannot be found or downloaded.
        """
        face = context.options.face
        settings = context.settings
        if swapper is None:
            if face.swapper is None:
                raise InvalidOptionsError("face_swapper needs a swapper model (options.face.swapper)")
            swapper = FaceSwapper.load(face.swapper, settings)
        if not context.sources:
            raise InvalidOptionsError("face_swapper needs at least one source image")
        detector = detector or FaceDetector.load(face, settings)
        embedder = embedder or FaceEmbedder.load(settings)
        identity = source_identity(identity_sources(context.sources, face.selector_mode), detector, embedder)
        targeter = FaceTargeter.load(face, context.sources, settings, detector=detector, embedder=embedder)
        return cls(
            swapper,
            targeter,
            identity,
            batch_size=settings.batch_size,
            batches=swapper.batches,
            mask_blur=face.mask_blur,
            mask_padding=face.mask_padding,
            reporter=Reporter(context.report, swapper.degradations),
        )

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames with every targeted face swapped."""
        faces = self.detector.detect(frames)
        work = Work(frames, faces, self.targeter.select(frames, faces) if self.targeter else faces)
        for stage in self.stages():
            work = stage(work)
        return work.frames

    def stages(self) -> tuple[Stage, ...]:
        """Align the targeted faces, swap them, paste them back (after the chain's detection)."""
        return self._align, self._swap, self._paste

    def _align(self, work: Work) -> Work:
        assert work.targets is not None
        work.state = gather_crops(work.frames, work.targets, self.swapper.template, self.swapper.size)
        return work

    def _swap(self, work: Work) -> Work:
        faces = work.state
        assert isinstance(faces, FaceCrops)
        if len(faces):
            swapped = self.batches.map(faces.crops, lambda crops: self.swapper.swap(crops, self.latent))
            work.state = faces, swapped
            logger.debug("swapped %s faces in %s frames", len(faces), len(work.frames))
        if self._reporter is not None:
            self._reporter.check()
        return work

    def _paste(self, work: Work) -> Work:
        if isinstance(work.state, tuple):
            faces, swapped = work.state
            work.frames = paste_crops(work.frames, faces, swapped, self.mask)
        work.state = None
        return work


@register("face_swapper")
def _build(context: ProcessorContext) -> FaceSwapperProcessor:
    return FaceSwapperProcessor.from_context(context)
