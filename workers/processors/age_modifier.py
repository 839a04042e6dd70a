"""``age_modifier``: the selected faces made older or younger by ``age_modifier.direction`` (FaceFusion's
age_modifier; the models in :mod:`workers.faces.aging`).

A :class:`~workers.processors.crop_paste.CropPasteProcessor` at 1024 px: per batch of frames, select the faces,
align every one of them of the whole batch onto the model's template (styleganex_age's from the five points widened
about the nose, :meth:`AgeModifierProcessor.refine`), give each face its state — fran's (age, age wanted) from the
FairFace bracket of the face as the chain left it, every face of the batch in one classifier call; styleganex_age's
matrix to the face alone — age them in batches fitted to memory, and paste them back through the feathered box
(without padding, as FaceFusion's age modifier) and the occlusion mask where ``face.mask_types`` asks for it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from shared.options import MaskType
from workers.faces.aging import PASTE_SIZE, AgeModel, fran_directions, styleganex_matrices, widen
from workers.faces.attributes import FaceClassifier
from workers.faces.detection import Face
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.processors.base import FrameBatch, ProcessorContext, Work, register
from workers.processors.crop_paste import CropPasteProcessor, common_arguments

FloatArray = npt.NDArray[np.float32]


class AgeModifierProcessor(CropPasteProcessor):
    """Ages the targeted faces of each batch of frames.

    Args:
        model: the age model.
        targeter: picks the faces.
        years: ``age_modifier.direction``, -100 to 100.
        classifier: FairFace, for fran's ages (``None`` for styleganex_age, which takes none).
        **arguments: the crop-and-paste arguments (:func:`~workers.processors.crop_paste.common_arguments`).

    Raises:
        ValueError: fran without a classifier.
    """

    verb = "aged"

    def __init__(
        self,
        model: AgeModel,
        targeter: FaceTargeter,
        *,
        years: int = 0,
        classifier: FaceClassifier | None = None,
        **arguments: object,
    ) -> None:
        if model.name == "fran" and classifier is None:
            raise ValueError("fran takes each face's age: it needs the FairFace classifier")
        super().__init__(model, targeter, **arguments)  # type: ignore[arg-type]
        self.model, self.years, self.classifier = model, years, classifier
        self.widened = model.template == "styleganex_384"

    @classmethod
    def from_context(cls, context: ProcessorContext) -> AgeModifierProcessor:
        """Build from a job's context, loading the models through the model registry.

        Raises:
            ModelError: a model cannot be found or downloaded.
        """
        options, settings = context.options, context.settings
        model = AgeModel.load(options.age_modifier.model, settings)
        classifier = FaceClassifier.load(settings) if model.name == "fran" else None
        face = options.face.model_copy(update={"mask_padding": (0, 0, 0, 0)})  # FaceFusion's: a box without padding
        types: tuple[MaskType, ...] = tuple(t for t in face.mask_types if t in ("box", "occlusion")) or ("box",)
        masked = dataclasses.replace(context, options=options.model_copy(update={"face": face}))
        more = [classifier.degradations] if classifier is not None else []
        arguments = common_arguments(masked, model, crop_size=PASTE_SIZE, mask_types=types, more=more)
        targeter = FaceTargeter.load(options.face, context.sources, settings)
        return cls(model, targeter, years=options.age_modifier.direction, classifier=classifier, **arguments)

    def refine(self, work: Work) -> tuple[Sequence[Sequence[Face]], list[npt.NDArray[np.float32]] | None]:
        """The batch's targets (aligned as the template does it), with styleganex_age's five points widened about
        the nose: its crop shows the face with its background."""
        targets, points = super().refine(work)
        if self.widened:
            targets = [
                [dataclasses.replace(face, landmarks=widen(face.landmarks)) for face in faces] for faces in targets
            ]
        return targets, points

    def face_state(self, frames: FrameBatch, targets: Sequence[Sequence[Face]]) -> FloatArray | None:
        """fran: each face's (age, age wanted) / 100 from its FairFace bracket, every face of the batch in one
        classifier call; styleganex_age: each face's matrix from its crop to the face alone."""
        if self.widened:
            return styleganex_matrices([face.landmarks for faces in targets for face in faces])
        assert self.classifier is not None
        found = self.classifier.classify(frames, targets)
        return fran_directions([attributes for faces in found for attributes in faces], self.years)

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops aged, each by its rows of ``state``."""
        assert state is not None
        return self.model.modify(crops, state, self.years)


@register("age_modifier")
def _build(context: ProcessorContext) -> AgeModifierProcessor:
    return AgeModifierProcessor.from_context(context)
