"""``face_swapper``: puts the source identity on the selected faces of every frame.

Per batch of frames: detect (one detector call per frame, shared with the rest of the chain), select, align every
selected face of the whole batch onto the swapper's template (by 68-point landmarks where ``face.landmarker_score``
asks for them), swap them in batches fitted to memory (at ``face.pixel_boost`` as k² tiles,
:mod:`workers.faces.boosting`), and paste them back through the ``face.mask_types`` masks
(:mod:`workers.faces.masking`) — three stages the render pipeline overlaps (:meth:`stages`). The source
identity is computed once, when the processor is built (see
:mod:`workers.faces.targeting` for which source images count as identity and which as reference).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError, NoFaceInSourceError
from workers.engines.batching import FittedBatches
from workers.faces.alignment import box_mask
from workers.faces.boosting import boost_factor, explode, implode
from workers.faces.cropping import FaceCrops, gather_crops, paste_crops
from workers.faces.detection import FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.faces.masking import FaceMasker, Masks
from workers.faces.recognition import FaceEmbedder, largest_face, read_image, source_identity
from workers.faces.swapping import FaceSwapper, Latent
from workers.faces.targeting import FaceTargeter, identity_sources
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, Stage, Work, register

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class _Aligned:
    """What the align stage hands the swap stage: the crops and, for the area mask, each face's 68 points in
    crop pixels."""

    faces: FaceCrops
    landmarks: FloatArray | None
    latents: FloatArray | None = None


@dataclass(frozen=True)
class _Swapped:
    faces: FaceCrops
    swapped: npt.NDArray[np.uint8]
    masks: Masks | None


class FaceSwapperProcessor:
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
        self.swapper = swapper
        self.crop_size = pixel_boost or swapper.size
        self.boost = boost_factor(self.crop_size, swapper.size)
        self.masker = masker if masker is not None and not masker.box_only else None
        self.landmarker = landmarker
        # FaceFusion's mix: latent·(1 − w′) + target/‖target‖·w′, w′ from 0.35 (weight 0) to −0.35 (weight 1)
        self.mix = float(np.interp(weight, [0.0, 1.0], [0.35, -0.35]))
        if self.mix != 0.0 and (embedder is None or not swapper.weighted):
            raise ValueError(f"swapper {swapper.name} does not take a swapper weight (or no embedder to mix by)")
        self.embedder = embedder
        self.targeter: FaceTargeter | None = targeter
        self.detector = targeter.detector
        self._reporter = reporter
        self.batches = batches or FittedBatches(batch_size)
        self.latent: Latent = (
            latent
            if latent is not None
            else swapper.source_latent(np.asarray(identity, dtype=np.float32).reshape(1, -1))
        )
        self.mask = box_mask(self.crop_size, mask_blur, mask_padding)

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
        masker = FaceMasker.from_options(face, settings, crop_size)
        landmarker = (
            FaceLandmarker.load(settings, min_score=face.landmarker_score)
            if masker.needs_landmarks or face.landmarker_score > 0
            else None
        )
        sources = [swapper.degradations, masker.degradations] + ([landmarker.degradations] if landmarker else [])
        return cls(
            swapper,
            targeter,
            identity,
            batch_size=settings.batch_size,
            batches=swapper.batches,
            mask_blur=face.mask_blur,
            mask_padding=face.mask_padding,
            reporter=Reporter(context.report, *sources),
            pixel_boost=crop_size,
            masker=masker,
            landmarker=landmarker,
            latent=latent,
            weight=face.swapper_weight,
            embedder=embedder,
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
        targets, landmarks = work.targets, None
        if self.landmarker is not None:
            found = self.landmarker.landmarks(work.frames, targets)
            targets = found.faces
            points = found.points
        faces = gather_crops(work.frames, targets, self.swapper.template, self.crop_size)
        if self.landmarker is not None and len(faces):
            landmarks = np.stack(
                [p.astype(np.float64) @ m[:, :2].T + m[:, 2] for p, m in zip(points, faces.transforms, strict=True)]
            ).astype(np.float32)
        latents = None
        if self.mix != 0.0 and len(faces):
            assert self.embedder is not None
            embedded = self.embedder.embed_frames(work.frames, targets)
            vectors = np.stack([face.embedding for frame in embedded for face in frame if face.embedding is not None])
            units = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            latents = (self.latent[None] * (1.0 - self.mix) + units * self.mix).astype(np.float32)
        work.state = _Aligned(faces, landmarks, latents)
        return work

    def _swap_crops(self, crops: npt.NDArray[np.uint8], latents: FloatArray | None = None) -> npt.NDArray[np.uint8]:
        tiles = crops if self.boost == 1 else implode(crops, self.boost)
        if latents is None:
            swapped = self.swapper.swap(tiles, self.latent)
        else:
            swapped = self.swapper.swap_each(tiles, np.repeat(latents, self.boost * self.boost, axis=0))
        return swapped if self.boost == 1 else explode(swapped, self.boost)

    def _swap(self, work: Work) -> Work:
        aligned = work.state
        assert isinstance(aligned, _Aligned)
        faces = aligned.faces
        if len(faces):
            before = self.masker.before(faces.crops) if self.masker is not None else None
            if aligned.latents is None:
                swapped = self.batches.map(faces.crops, self._swap_crops)
            else:
                latents, done = aligned.latents, [0]

                def step(part: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
                    # map hands consecutive slices in order (a slice that ran out of memory comes again, smaller)
                    start = done[0]
                    result = self._swap_crops(part, latents[start : start + len(part)])
                    done[0] = start + len(part)
                    return result

                swapped = self.batches.map(faces.crops, step)
            masks = (
                self.masker.combine(swapped, before=before, landmarks=aligned.landmarks)
                if self.masker is not None
                else None
            )
            work.state = _Swapped(faces, swapped, masks)
            logger.debug("swapped %s faces in %s frames", len(faces), len(work.frames))
        if self._reporter is not None:
            self._reporter.check()
        return work

    def _paste(self, work: Work) -> Work:
        if isinstance(work.state, _Swapped):
            done = work.state
            mask = done.masks if done.masks is not None else self.mask
            work.frames = paste_crops(work.frames, done.faces, done.swapped, mask)
        work.state = None
        return work


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
