"""``face_enhancer``: restores the selected faces of every frame with a face-restoration model.

A :class:`~workers.processors.crop_paste.CropPasteProcessor`: per batch of frames, detect (shared with the rest of
the chain: after a swapper, the faces found on the decoded frames), select, align every selected face of the whole
batch onto the enhancer's template, enhance them in batches fitted to memory, and paste them back — stages the
render pipeline overlaps. ``enhancer_blend`` (0–100) is how much of the enhanced face shows, as FaceFusion's
``face_enhancer_blend``: it scales the paste-back mask — the feathered box, and the occlusion mask where
``face.mask_types`` asks for it (FaceFusion's enhancer takes those two of the mask types).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError
from workers.engines.batching import FittedBatches
from workers.faces.detection import FaceDetector
from workers.faces.enhancing import FaceEnhancer
from workers.faces.masking import FaceMasker
from workers.faces.recognition import FaceEmbedder
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.processors.base import ProcessorContext, Reporter, register
from workers.processors.crop_paste import CropPasteProcessor, common_arguments

FloatArray = npt.NDArray[np.float32]


class FaceEnhancerProcessor(CropPasteProcessor):
    """Enhances the targeted faces of each batch of frames.

    Args:
        enhancer: the restoration model.
        targeter: picks the faces to enhance.
        weight: the model's fidelity weight (CodeFormer's ``w``; other models ignore it).
        blend: 0–100, the share of the enhanced face in the result.
        batch_size: faces per enhancer call, unless ``batches`` is given.
        batches: faces per enhancer call fitted to the device's memory, halved on out-of-memory.
        mask_blur, mask_padding: the paste-back box mask (:func:`workers.faces.alignment.box_mask`).
        masker: the paste-back masks; only its occlusion mask counts beyond the box.
    """

    verb = "enhanced"

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
        super().__init__(
            enhancer,
            targeter,
            batch_size=batch_size,
            batches=batches,
            mask_blur=mask_blur,
            mask_padding=mask_padding,
            mask_scale=blend / 100,
            reporter=reporter,
            masker=masker if masker is not None and masker.occluder is not None else None,
        )
        self.enhancer = enhancer
        self.weight = weight

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
        arguments = common_arguments(context, enhancer, mask_types=types, landmarks=False)
        del arguments["crop_size"], arguments["landmarker"]
        targeter = FaceTargeter.load(face, context.sources, settings, detector=detector, embedder=embedder)
        return cls(enhancer, targeter, weight=face.codeformer_weight, blend=face.enhancer_blend, **arguments)

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops enhanced at the fidelity weight."""
        return self.enhancer.enhance(crops, self.weight)


@register("face_enhancer")
def _build(context: ProcessorContext) -> FaceEnhancerProcessor:
    return FaceEnhancerProcessor.from_context(context)
