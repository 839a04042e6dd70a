"""``deep_swapper``: the selected faces replaced by a DeepFaceLive model's person (FaceFusion's deep_swapper; the
models in :mod:`workers.faces.deep_swapping`). It needs no source image: the person is the model's.

A :class:`~workers.processors.crop_paste.CropPasteProcessor` at the model's own side (224–448 px in the catalogue):
per batch of frames, select the faces, align every one of them of the whole batch onto dfl_whole_face, swap them in
batches fitted to memory (``deep_swapper.morph`` for the models that take it), and paste them back through the
minimum of the model's own mask and the ``face.mask_types`` masks (the feathered box with ``face.mask_padding``,
occlusion, area, region), as FaceFusion does.
"""

from __future__ import annotations

from workers.faces.deep_swapping import DeepSwapModel, Masks
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.processors.base import ProcessorContext, register
from workers.processors.crop_paste import CropPasteProcessor, FloatArray, common_arguments


class DeepSwapperProcessor(CropPasteProcessor):
    """Swaps the targeted faces of each batch of frames to the model's person.

    Args:
        model: the DeepFaceLive model.
        targeter: picks the faces.
        morph: ``deep_swapper.morph``, 0–100 (for models with a ``morph_value:0`` input).
        **arguments: the crop-and-paste arguments (:func:`~workers.processors.crop_paste.common_arguments`).
    """

    verb = "deep-swapped"

    def __init__(self, model: DeepSwapModel, targeter: FaceTargeter, *, morph: int = 100, **arguments: object) -> None:
        super().__init__(model, targeter, **arguments)  # type: ignore[arg-type]
        self.model, self.morph = model, morph

    @classmethod
    def from_context(cls, context: ProcessorContext) -> DeepSwapperProcessor:
        """Build from a job's context, loading the model (a catalogue id or the operator's ``custom/<stem>``).

        Raises:
            ModelError: ``model_unavailable`` (unknown, missing) or ``model_invalid`` (not a DeepFaceLive model).
        """
        options = context.options
        model = DeepSwapModel.load(options.deep_swapper.model, context.settings)
        arguments = common_arguments(context, model)
        targeter = FaceTargeter.load(options.face, context.sources, context.settings)
        return cls(model, targeter, morph=options.deep_swapper.morph, **arguments)

    def transform_with_masks(self, crops: Crops, state: FloatArray | None = None) -> tuple[Crops, Masks | None]:
        """The crops swapped, with the model's masks of them."""
        return self.model.swap(crops, self.morph)

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops swapped."""
        return self.model.swap(crops, self.morph)[0]


@register("deep_swapper")
def _build(context: ProcessorContext) -> DeepSwapperProcessor:
    return DeepSwapperProcessor.from_context(context)
