"""Face recognition: ArcFace embeddings of aligned crops, and the identity of a set of source images.

FaceFusion's recogniser convention (docs/MODELS.md §5, kept in the model registry): crop with
``arcface_112_v2`` at 112 px, BGR → RGB, ``x / 127.5 − 1``, NCHW float32. Embeddings are returned raw (not
normalised); callers normalise when they compare (:func:`normalise`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

from shared.errors import NoFaceInSourceError, SourceImageError
from shared.settings import Settings
from workers import degradations
from workers.engines.base import Engine
from workers.engines.onnx import OnnxEngine
from workers.faces.crop_model import CropModel
from workers.faces.cropping import gather_crops
from workers.faces.detection import Face, FaceDetector
from workers.models.download import resolve
from workers.models.registry import REGISTRY

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
Frame = npt.NDArray[np.uint8]

DEFAULT_RECOGNISER = "arcface_w600k_r50"


def normalise(embeddings: npt.ArrayLike) -> FloatArray:
    """Embeddings scaled to unit length along the last axis (a zero vector stays zero)."""
    array = np.asarray(embeddings, dtype=np.float32)
    norms = np.linalg.norm(array, axis=-1, keepdims=True)
    return np.asarray(array / np.maximum(norms, np.float32(1e-12)), dtype=np.float32)


class FaceEmbedder(CropModel):
    """Embeds aligned faces with an ArcFace-style recogniser ([N, 3, 112, 112] → [N, D]).

    The crop template, size, normalisation and colour order are those the registry gives ``model``.

    Raises:
        ModelError: ``model`` is not a model of aligned face crops.
        ValueError: ``batch_size`` is below 1.

    Args:
        engine: the recogniser, loaded.
        model: its registry name.
        batch_size: crops per engine call at most.
        fixed_batch: the batch size the model file is fixed to (``None`` if dynamic); calls are split and
            padded to it.

    Example:
        >>> embedder = FaceEmbedder.load(settings)                       # doctest: +SKIP
        >>> faces = embedder.embed_faces(frame, detector.detect_frame(frame))   # doctest: +SKIP
    """

    def __init__(
        self,
        engine: Engine,
        *,
        model: str = DEFAULT_RECOGNISER,
        batch_size: int = 8,
        fixed_batch: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        super().__init__(REGISTRY[model], engine, inputs=engine.input_names[:1], fixed_batch=fixed_batch)
        self.batch_size = batch_size
        self._input_name = engine.input_names[0]

    @classmethod
    def load(cls, settings: Settings, model: str = DEFAULT_RECOGNISER) -> FaceEmbedder:
        """Load the recogniser ``model`` from the model registry; ``settings.batch_size`` crops per call.

        Raises:
            ModelError: the model file cannot be found, downloaded or loaded.
        """
        engine = OnnxEngine.load(resolve(model, settings), settings)
        fixed_batch = engine.fixed_batch(engine.input_names[0])
        return cls(engine, model=model, batch_size=settings.batch_size, fixed_batch=fixed_batch)

    def embed_crops(self, crops: Frame) -> FloatArray:
        """Raw embeddings (float32 [N, D]) of aligned uint8 BGR crops [N, 112, 112, 3]."""
        if len(crops) == 0:
            return np.zeros((0, 0), dtype=np.float32)
        tensor = self._format.to_tensor(crops)
        parts = [self._run(tensor[start : start + self.batch_size]) for start in range(0, len(tensor), self.batch_size)]
        return np.concatenate(parts)

    def _run(self, batch: FloatArray) -> FloatArray:
        outputs = self._outputs(len(batch), lambda indices: {self._input_name: batch[indices]})
        return np.asarray(outputs[0], dtype=np.float32).reshape(len(batch), -1)

    def embed_faces(self, frame: Frame, faces: Sequence[Face]) -> list[Face]:
        """The faces of one frame, each carrying its raw embedding."""
        return self.embed_frames([frame], [faces])[0]

    def embed_frames(
        self, frames: Frame | Sequence[Frame], faces_per_frame: Sequence[Sequence[Face]]
    ) -> list[list[Face]]:
        """The faces of a batch of frames, each carrying its embedding.

        The crops of all frames are embedded together, ``batch_size`` per engine call.
        """
        crops = gather_crops(frames, faces_per_frame, self.template, self.size)
        embeddings = self.embed_crops(crops.crops)
        flat = [face for faces in faces_per_frame for face in faces]
        result: list[list[Face]] = [[] for _ in faces_per_frame]
        for face, embedding, index in zip(flat, embeddings, crops.frame_indices, strict=True):
            result[int(index)].append(face.with_embedding(embedding))
        return result


def read_image(path: Path) -> Frame:
    """A BGR uint8 image from ``path``.

    Raises:
        SourceImageError: the file cannot be read or is not an image OpenCV decodes.
    """
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as error:
        raise SourceImageError(f"cannot read source image {path.name}: {error.strerror}") from error
    try:  # over OpenCV's image-size cap (OPENCV_IO_MAX_IMAGE_PIXELS, set by the worker) it raises, not decodes
        image = cv2.imdecode(data, cv2.IMREAD_COLOR) if data.size else None
    except cv2.error as error:
        raise SourceImageError(f"source image {path.name} is too large or not a readable image") from error
    if image is None:
        raise SourceImageError(f"source image {path.name} is not a readable image")
    return np.asarray(image, dtype=np.uint8)


def largest_face(faces: Sequence[Face]) -> Face:
    """The face with the largest box (ties: the first)."""
    return max(faces, key=lambda face: face.area)


def source_identity(images: Sequence[Path], detector: FaceDetector, embedder: FaceEmbedder) -> FloatArray:
    """The identity shown by a set of source images: the normalised mean of their normalised embeddings.

    Each image contributes its largest face; an image with several is reported (``source_several_faces``, naming
    the face used), never chosen from silently.

    Returns:
        float32 [D], unit length.

    Raises:
        ValueError: ``images`` is empty.
        SourceImageError: an image cannot be read.
        NoFaceInSourceError: an image shows no face; the message names the file.
    """
    if not images:
        raise ValueError("source_identity needs at least one image")
    embeddings = []
    for number, path in enumerate(images, start=1):
        image = read_image(path)
        faces = detector.detect_frame(image)
        if not faces:
            raise NoFaceInSourceError(f"no face found in source image {path.name}")
        largest = largest_face(faces)
        if len(faces) > 1:
            x1, y1, x2, y2 = (int(round(float(v))) for v in largest.box[:4])
            degradations.report(
                "source_several_faces",
                f"source image {number} shows {len(faces)} faces; the largest was used "
                f"(box x {x1}-{x2}, y {y1}-{y2} of the {image.shape[1]}x{image.shape[0]} image)",
            )
        face = embedder.embed_faces(image, [largest])[0]
        assert face.embedding is not None
        embeddings.append(face.embedding)
        logger.debug("source %s: %s faces, using the largest (score %.2f)", path.name, len(faces), face.score)
    return normalise(normalise(np.stack(embeddings)).mean(axis=0))
