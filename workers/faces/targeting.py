"""Which faces a face processor works on: detection over a batch of frames, then the job's selector mode.

Source images and the reference face (``selector_mode="reference"``):

* With two or more source images, the **last** one is the reference: it shows the person whose faces are
  processed, and the others give the identity a swapper puts in (:func:`identity_sources`).
* With one source image, it is both the identity and the reference.
* The enhancer, which puts in no identity, takes the last source as the reference too. Reference mode
  without any source image is an options error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from shared.errors import InvalidOptionsError
from shared.options import FaceOptions, SelectorMode, SelectorOrder
from shared.settings import Settings
from workers.faces.attributes import AttributeFilter, FaceClassifier, order_faces
from workers.faces.detection import Face, FaceDetector
from workers.faces.recognition import FaceEmbedder, source_identity
from workers.faces.selection import select_faces

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
Frames = npt.NDArray[np.uint8]


def identity_sources(sources: Sequence[Path], mode: SelectorMode) -> Sequence[Path]:
    """The source images that define the identity put in: all of them, except the reference when
    ``mode`` is ``reference`` and there are two or more."""
    if mode == "reference" and len(sources) > 1:
        return sources[:-1]
    return sources


def reference_source(sources: Sequence[Path]) -> Path:
    """The image showing the reference face: the last source.

    Raises:
        InvalidOptionsError: there is no source image.
    """
    if not sources:
        raise InvalidOptionsError("selector mode 'reference' needs a source image showing the reference face")
    return sources[-1]


class FaceTargeter:
    """Finds, in each frame of a batch, the faces the job's selector mode picks.

    Args:
        detector: finds the faces.
        mode: the selector mode.
        embedder: embeds the detected faces; required for ``reference``.
        reference: the reference embedding; required for ``reference``.
        max_distance: the largest cosine distance to the reference still selected.
        order: the order ``one`` takes the first face of (:func:`workers.faces.attributes.order_faces`).
        attributes: keeps only faces of a gender and age range (FairFace), before any mode selects.

    Raises:
        ValueError: ``reference`` mode without an embedder or a reference embedding.
    """

    def __init__(
        self,
        detector: FaceDetector,
        mode: SelectorMode = "all",
        *,
        embedder: FaceEmbedder | None = None,
        reference: FloatArray | None = None,
        max_distance: float = 0.6,
        order: SelectorOrder = "large-small",
        attributes: AttributeFilter | None = None,
    ) -> None:
        if mode == "reference" and (embedder is None or reference is None):
            raise ValueError("reference selection needs an embedder and a reference embedding")
        self.detector = detector
        self.mode = mode
        self.embedder = embedder
        self.reference = reference
        self.max_distance = max_distance
        self.order: SelectorOrder = order
        self.attributes = attributes

    @classmethod
    def load(
        cls,
        options: FaceOptions,
        sources: Sequence[Path],
        settings: Settings,
        *,
        detector: FaceDetector | None = None,
        embedder: FaceEmbedder | None = None,
    ) -> FaceTargeter:
        """The targeter the job's options ask for, loading the models it needs that are not given.

        In ``reference`` mode the reference embedding is computed here, once, from :func:`reference_source`.

        Raises:
            InvalidOptionsError: ``reference`` mode without a source image.
            SourceImageError, NoFaceInSourceError: the reference image is unreadable or shows no face.
            ModelError: a model cannot be found or downloaded.
        """
        detector = detector or FaceDetector.load(options, settings)
        attributes = (
            AttributeFilter(
                FaceClassifier.load(settings),
                options.selector_gender,
                options.selector_age_start,
                options.selector_age_end,
            )
            if options.filters_by_attribute
            else None
        )
        if options.selector_mode != "reference":
            return cls(detector, options.selector_mode, order=options.selector_order, attributes=attributes)
        reference_image = reference_source(sources)
        embedder = embedder or FaceEmbedder.load(settings)
        reference = source_identity([reference_image], detector, embedder)
        logger.info("reference face taken from %s", reference_image.name)
        return cls(
            detector,
            "reference",
            embedder=embedder,
            reference=reference,
            max_distance=options.reference_distance,
            order=options.selector_order,
            attributes=attributes,
        )

    def targets(self, frames: Frames | Sequence[Frames]) -> list[list[Face]]:
        """The selected faces of each frame, one list per frame, in order."""
        return self.select(frames, self.detector.detect(frames))

    def select(self, frames: Frames | Sequence[Frames], detected: Sequence[list[Face]]) -> list[list[Face]]:
        """The faces the selector mode picks among ``detected`` (one list per frame of ``frames``)."""
        if self.attributes is not None:
            detected = self.attributes.filter(frames, detected)
        if self.mode == "one":
            return [order_faces(faces, self.order)[:1] for faces in detected]
        if self.mode == "reference" and self.embedder is not None:
            detected = self.embedder.embed_frames(frames, list(detected))
        return [
            select_faces(faces, self.mode, reference=self.reference, max_distance=self.max_distance)
            for faces in detected
        ]
