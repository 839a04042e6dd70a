"""``face_swapper``: puts the source identity on the selected faces of every frame.

Per batch of frames: detect (one detector call per frame, shared with the rest of the chain), select, align every
selected face of the whole batch onto the swapper's template, swap them in batches fitted to memory, and paste
them back with a feathered box mask — three stages the render pipeline overlaps (:meth:`stages`). The source
identity is computed once, when the processor is built (see
:mod:`workers.faces.targeting` for which source images count as identity and which as reference).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError
from workers.engines.batching import FittedBatches
from workers.faces.detection import FaceDetector
from workers.faces.recognition import FaceEmbedder, source_identity
from workers.faces.swapping import FaceSwapper, Latent
from workers.faces.targeting import FaceTargeter, identity_sources
from workers.faces.tensors import Crops
from workers.processors.base import ProcessorContext, Reporter, register
from workers.processors.crop_paste import CropPasteProcessor, common_arguments

FloatArray = npt.NDArray[np.float32]


class FaceSwapperProcessor(CropPasteProcessor):
    """Swaps the targeted faces of each batch of frames to one identity.

    Args:
        swapper: the swap model.
        targeter: picks the faces to swap.
        identity: the source identity, a unit ArcFace embedding [512] (:func:`source_identity`).
        batch_size: faces per swapper call, unless ``batches`` is given.
        batches: faces per swapper call fitted to the device's memory, halved on out-of-memory.
        mask_blur, mask_padding: the paste-back box mask (:func:`workers.faces.alignment.box_mask`).
    """

    verb = "swapped"

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
        super().__init__(
            swapper,
            targeter,
            batch_size=batch_size,
            batches=batches,
            mask_blur=mask_blur,
            mask_padding=mask_padding,
            reporter=reporter,
        )
        self.swapper = swapper
        self.latent: Latent = swapper.source_latent(np.asarray(identity, dtype=np.float32).reshape(1, -1))

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
        return cls(swapper, targeter, identity, **common_arguments(context, swapper))

    def transform(self, crops: Crops) -> Crops:
        """The crops with the source identity swapped in."""
        return self.swapper.swap(crops, self.latent)


@register("face_swapper")
def _build(context: ProcessorContext) -> FaceSwapperProcessor:
    return FaceSwapperProcessor.from_context(context)
