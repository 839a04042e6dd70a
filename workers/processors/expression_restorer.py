"""``expression_restorer``: the targeted faces get back the expression they had in the frame as decoded (after a
swap: the swapped face with the filmed face's expression), through LivePortrait (:mod:`workers.live_portrait`).

A :class:`~workers.processors.crop_paste.CropPasteProcessor` on arcface_128 crops at 512²: each face is cut twice
with the same transform, from the frame as it reaches the processor (the working crop) and from the frame as decoded
(the original crop, :attr:`~workers.processors.base.Work.decoded`: the render pipeline keeps a copy where a
processor before this one changes the frames). The working crops' appearance volumes and motion, and the original
crops' expressions, come from one feature-extractor call and one motion-extractor call over all the faces of the
batch (working and original together); the restored expression is

    e = clip(f·e_original + (1 − f)·e_working),  f = 1.2·factor / 100

on the chosen areas' keypoints (:data:`AREAS`; the others, and keypoints 0, 4, 5, 8, 9, keep e_working), and the
generator redraws each working face from its own keypoints K(e_working) to K(e), in one call. The result is pasted
back through the feathered box (no padding) and, where ``face.mask_types`` asks for it, the occlusion mask
(FaceFusion's expression_restorer).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import numpy.typing as npt

from shared.options import ExpressionArea
from workers.faces.alignment import warp_faces
from workers.faces.cropping import FaceCrops
from workers.faces.detection import Face
from workers.faces.targeting import FaceTargeter
from workers.faces.tensors import Crops
from workers.live_portrait import CROP, RESTORER_PARTS, LivePortrait, clip_expression
from workers.processors.base import ProcessorContext, Work, register
from workers.processors.crop_paste import Aligned, CropPasteProcessor, common_arguments

FloatArray = npt.NDArray[np.float32]

# The keypoints each area's expression moves (FaceFusion's); the rest (0, 4, 5, 8, 9) always keep the working one.
AREAS: dict[ExpressionArea, tuple[int, ...]] = {
    "upper-face": (1, 2, 6, 10, 11, 12, 13, 15, 16),
    "lower-face": (3, 7, 14, 17, 18, 19, 20),
}


def restored_expression(
    original: FloatArray, working: FloatArray, factor: int, areas: Collection[ExpressionArea]
) -> FloatArray:
    """The expressions [N, 21, 3] the faces get: ``original``'s on the keypoints of ``areas``, blended over
    ``working``'s by ``factor`` (0–100, at 100 a fifth past the original), clipped to the keypoints' bounds."""
    chosen = np.zeros(original.shape[1], bool)
    for area in areas:
        chosen[list(AREAS[area])] = True
    weight = np.float32(1.2 * factor / 100)
    blended = np.where(chosen[None, :, None], original * weight + working * (np.float32(1) - weight), working)
    return clip_expression(blended)


class ExpressionRestorerProcessor(CropPasteProcessor):
    """Restores the decoded expression of the targeted faces of each batch of frames.

    Args:
        portrait: LivePortrait's extractors and generator, on arcface_128 crops.
        targeter: picks the faces.
        factor: 0–100, how much of the decoded expression comes back.
        areas: the parts of the face whose expression comes back.
        **arguments: the crop-and-paste arguments (:func:`~workers.processors.crop_paste.common_arguments`).
    """

    verb = "restored"
    reads_decoded = True
    """It reads the frames as decoded (:func:`workers.pipeline.decoded_kept`)."""

    def __init__(
        self,
        portrait: LivePortrait,
        targeter: FaceTargeter,
        *,
        factor: int = 80,
        areas: Collection[ExpressionArea] = ("upper-face", "lower-face"),
        **arguments: object,
    ) -> None:
        super().__init__(portrait, targeter, **arguments)  # type: ignore[arg-type]
        self.portrait, self.factor, self.areas = portrait, factor, tuple(areas)

    @classmethod
    def from_context(cls, context: ProcessorContext) -> ExpressionRestorerProcessor:
        """Build from a job's context, loading the models through the model registry.

        Raises:
            ModelError: a model cannot be found or downloaded.
        """
        options, settings = context.options, context.settings
        portrait = LivePortrait.load("arcface_128", RESTORER_PARTS, settings)
        types = tuple(kind for kind in options.face.mask_types if kind in ("box", "occlusion")) or ("box",)
        # aligned by 2dfan4's points where face.landmarker_score asks for them (FaceFusion's 5/68), as the swapper
        arguments = common_arguments(context, portrait, crop_size=CROP, mask_types=types)
        arguments["mask_padding"] = (0, 0, 0, 0)  # FaceFusion's box here has none, whatever face.mask_padding says
        targeter = FaceTargeter.load(options.face, context.sources, settings)
        restorer = options.expression_restorer
        return cls(portrait, targeter, factor=restorer.factor, areas=restorer.areas, **arguments)

    def aligned(
        self,
        work: Work,
        faces: FaceCrops,
        targets: Sequence[Sequence[Face]],
        points: Sequence[npt.NDArray[np.float32]] | None,
    ) -> Aligned:
        """Each face's state: its original crop (cut from the frame as decoded with the working crop's transform),
        as the extractors take it."""
        done = super().aligned(work, faces, targets, points)
        if not len(faces):
            return done
        decoded = work.decoded if work.decoded is not None else work.frames
        originals = np.concatenate(
            [warp_faces(decoded[index], [transform], CROP) for transform, index in zip(
                faces.transforms, faces.frame_indices.tolist(), strict=True
            )]
        )  # fmt: skip
        state = self.portrait.prepare(originals).reshape(len(faces), -1)
        return Aligned(done.faces, done.landmarks, state)

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops with their decoded expression restored (``state``: their original crops, prepared)."""
        assert state is not None
        count = len(crops)
        working = self.portrait.prepare(crops)
        volume = self.portrait.features(working)
        both = self.portrait.motion(np.concatenate([working, state.reshape(working.shape)]))
        motion = both.take(slice(0, count))
        expression = restored_expression(both.expression[count:], motion.expression, self.factor, self.areas)
        return self.portrait.generate(volume, motion.keypoints(expression), motion.keypoints())


@register("expression_restorer")
def _build(context: ProcessorContext) -> ExpressionRestorerProcessor:
    return ExpressionRestorerProcessor.from_context(context)
