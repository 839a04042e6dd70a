"""``face_swapper``: puts the source identity on the selected faces of every frame.

A :class:`~workers.processors.crop_paste.CropPasteProcessor`: per batch of frames, detect (one detector call per
frame, shared with the rest of the chain), select, align every selected face of the whole batch onto the swapper's
template (by 68-point landmarks where ``face.landmarker_score`` asks for them), swap them in batches fitted to
memory (at ``face.pixel_boost`` as k² tiles, :mod:`workers.faces.boosting`), and paste them back through the
``face.mask_types`` masks (:mod:`workers.faces.masking`) — three stages the render pipeline overlaps. The source
identity is computed once, when the processor is built (see :mod:`workers.faces.targeting` for which source
images count as identity and which as reference).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError, NoFaceInSourceError
from workers.engines.batching import FittedBatches
from workers.faces.boosting import boost_factor, explode, implode
from workers.faces.cropping import gather_crops
from workers.faces.detection import Face, FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.faces.masking import FaceMasker
from workers.faces.recognition import FaceEmbedder, largest_face, read_image, source_identity
from workers.faces.swapping import FaceSwapper, Latent
from workers.faces.targeting import FaceTargeter, identity_sources
from workers.faces.tensors import Crops
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, register
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
        pixel_boost: the side of the crops to swap (a multiple of the swapper's size); ``None``: its size.
        masker: the paste-back masks beyond the box (``None``: the box alone).
        landmarker: 68-point landmarks, for the area mask and the refined alignment.
        latent: the swapper's source latent, when it does not come from ``identity`` (a model that takes the
            source face as an image: :func:`source_face_latent`).
        weight: ``face.swapper_weight``; away from 0.5 each face's latent is mixed with its own identity
            (``embedder`` embeds the targets), as FaceFusion mixes it.
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
        pixel_boost: int | None = None,
        masker: FaceMasker | None = None,
        landmarker: FaceLandmarker | None = None,
        latent: Latent | None = None,
        weight: float = 0.5,
        embedder: FaceEmbedder | None = None,
    ) -> None:
        """
        Raises:
            ValueError: ``pixel_boost`` is not a multiple of the swapper's size.
        """
        crop_size = pixel_boost or swapper.size
        self.boost = boost_factor(crop_size, swapper.size)
        # FaceFusion's mix: latent·(1 − w′) + target/‖target‖·w′, w′ from 0.35 (weight 0) to −0.35 (weight 1)
        self.mix = float(np.interp(weight, [0.0, 1.0], [0.35, -0.35]))
        if self.mix != 0.0 and (embedder is None or not swapper.weighted):
            raise ValueError(f"swapper {swapper.name} does not take a swapper weight (or no embedder to mix by)")
        super().__init__(
            swapper,
            targeter,
            batch_size=batch_size,
            batches=batches,
            mask_blur=mask_blur,
            mask_padding=mask_padding,
            reporter=reporter,
            crop_size=crop_size,
            masker=masker,
            landmarker=landmarker,
        )
        self.swapper = swapper
        self.embedder = embedder
        self.latent: Latent = (
            latent
            if latent is not None
            else swapper.source_latent(np.asarray(identity, dtype=np.float32).reshape(1, -1))
        )

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
        identity_images = identity_sources(context.sources, face.selector_mode)
        identity = source_identity(identity_images, detector, embedder)
        latent = source_face_latent(swapper, identity_images, detector) if swapper.source_crop else None
        if face.swapper_weight != 0.5 and not swapper.weighted:
            raise InvalidOptionsError(
                f"options.face.swapper_weight: swapper {swapper.name} has no identity weight (only inswapper, "
                "hyperswap and simswap do); leave it at 0.5"
            )
        targeter = FaceTargeter.load(face, context.sources, settings, detector=detector, embedder=embedder)
        crop_size = face.pixel_boost or swapper.size
        try:
            boost_factor(crop_size, swapper.size)
        except ValueError as error:
            raise InvalidOptionsError(f"options.face.pixel_boost: {error}") from error
        arguments = common_arguments(context, swapper, crop_size=crop_size)
        pixel_boost = arguments.pop("crop_size")
        return cls(
            swapper,
            targeter,
            identity,
            pixel_boost=pixel_boost,
            latent=latent,
            weight=face.swapper_weight,
            embedder=embedder,
            **arguments,
        )

    def face_state(self, frames: FrameBatch, targets: Sequence[Sequence[Face]]) -> FloatArray | None:
        """Each face's latent mixed with its own identity where ``face.swapper_weight`` is away from 0.5."""
        if self.mix == 0.0:
            return None
        assert self.embedder is not None
        embedded = self.embedder.embed_frames(frames, targets)
        vectors = np.stack([face.embedding for frame in embedded for face in frame if face.embedding is not None])
        units = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        mixed: FloatArray = (self.latent[None] * (1.0 - self.mix) + units * self.mix).astype(np.float32)
        return mixed

    def transform(self, crops: Crops, state: FloatArray | None = None) -> Crops:
        """The crops swapped (as k² tiles at a pixel boost), each to its own latent where ``state`` holds them."""
        tiles = crops if self.boost == 1 else implode(crops, self.boost)
        if state is None:
            swapped = self.swapper.swap(tiles, self.latent)
        else:
            swapped = self.swapper.swap_each(tiles, np.repeat(state, self.boost * self.boost, axis=0))
        return swapped if self.boost == 1 else explode(swapped, self.boost)


def source_face_latent(swapper: FaceSwapper, images: Sequence[Path], detector: FaceDetector) -> Latent:
    """The latent of a swapper that takes the source face as an image: the largest face of the first source
    image, aligned to the model's source template (FaceFusion uses its first source face the same way).

    Raises:
        SourceImageError, NoFaceInSourceError: the image is unreadable or shows no face.
    """
    assert swapper.source_crop is not None
    template, side = swapper.source_crop
    image = read_image(images[0])
    faces = detector.detect_frame(image)
    if not faces:
        raise NoFaceInSourceError(f"no face found in source image {images[0].name}")
    crop = gather_crops([image], [[largest_face(faces)]], template, side).crops[0]
    return swapper.source_image_latent(crop)


@register("face_swapper")
def _build(context: ProcessorContext) -> FaceSwapperProcessor:
    return FaceSwapperProcessor.from_context(context)
