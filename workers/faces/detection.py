"""Face detection: letterboxing, the four detector families, and :class:`FaceDetector`.

Everything here follows FaceFusion's conventions (docs/MODELS.md §8): the frame is shrunk to fit the detector
size keeping its aspect ratio (never enlarged) and zero-padded bottom/right, fed in BGR order, and the decoded
boxes and landmarks are divided by the kept scale to land in frame coordinates. The decoders of the outputs are in
:mod:`workers.faces.decoding`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import cv2
import numpy as np
import numpy.typing as npt

from shared.options import Detector, FaceOptions
from shared.settings import Settings
from workers.engines.base import Engine, Tensor
from workers.engines.onnx import OnnxEngine
from workers.faces.decoding import NMS_THRESHOLD as NMS_THRESHOLD  # re-exported
from workers.faces.decoding import (
    Detections,
    Size,
    decode_scrfd,
    decode_yolo_face,
    decode_yunet,
    suppress_detections,
)
from workers.faces.tensors import picture_to_tensor
from workers.faces.tiling import AT_ONCE_MOST, inside_tile, seen_at, tile_origins, tile_pool
from workers.models.download import resolve
from workers.models.registry import REGISTRY, ColourOrder, Normalisation

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
Frame = npt.NDArray[np.uint8]

DETECTOR_THREADS = 1
"""ONNX Runtime's intra-op threads for a detector's session. A detector is small, and its callers run it from
several threads at once (a frame's tiles two at a time, strict mode's scans two frames at a time), beside the job's
other stages; a session of its own threads per physical core made them contend. Two callers at once spent 7.6–9.4
CPU-ms a 640-px YuNet run with one against 8.1–10.5 with the default; whole strict face_blur jobs of a 1080p clip,
0.83–0.97 of the CPU (docs/performance.md)."""


@dataclass(frozen=True, eq=False)
class Face:
    """One detected face, in the coordinates of the frame it was found in.

    Attributes:
        box: float32 [4], ``x1, y1, x2, y2``.
        landmarks: float32 [5, 2], ``(x, y)`` of left eye, right eye, nose tip, left and right mouth corner.
        score: the detector's confidence, 0…1.
        embedding: float32 [D], the recogniser's raw embedding, once one has been computed.
        track: the face track it belongs to (:mod:`workers.faces.tracking`), once tracked.
        filled: not detected in this frame but filled in by its track across a short gap.
        lost: filled in past its track's last detection (carried on by its motion: the track is lost here).
    """

    box: FloatArray
    landmarks: FloatArray
    score: float
    embedding: FloatArray | None = field(default=None)
    track: int | None = field(default=None)
    filled: bool = field(default=False)
    lost: bool = field(default=False)

    @property
    def area(self) -> float:
        """The box area in pixels² (0 for a degenerate box)."""
        width = max(float(self.box[2] - self.box[0]), 0.0)
        height = max(float(self.box[3] - self.box[1]), 0.0)
        return width * height

    def with_embedding(self, embedding: FloatArray) -> Face:
        """A copy of this face carrying ``embedding``."""
        return replace(self, embedding=embedding)


Decoder = Callable[[Mapping[str, Tensor], Size, float], Detections]


@dataclass(frozen=True)
class DetectorSpec:
    """How to run one detector family.

    Attributes:
        model: the registry name of the model file; its normalisation and colour order come from the registry
            (:data:`workers.models.registry.REGISTRY`).
        fixed_size: the only input size the published model accepts, or ``None`` for any multiple of 32.
        decode: turns the named outputs, the input size and a score threshold into :class:`Detections`.
        any_size: the network is fully convolutional: with its input's height and width freed
            (:meth:`~workers.engines.onnx.OnnxEngine.any_size`) one run takes a picture of any size (multiples of
            32), in place of tiles.
    """

    model: str
    fixed_size: int | None
    decode: Decoder
    any_size: bool = False

    @property
    def normalisation(self) -> Normalisation:
        """The model's ``(pixel - mean) / std``, from the registry."""
        normalisation = REGISTRY[self.model].normalisation
        assert normalisation is not None, f"registry entry {self.model} lacks a normalisation"
        return normalisation

    @property
    def colour_order(self) -> ColourOrder:
        """The model's channel order, from the registry."""
        colour_order = REGISTRY[self.model].colour_order
        assert colour_order is not None, f"registry entry {self.model} lacks a colour order"
        return colour_order


def letterbox(frame: Frame, size: int) -> tuple[Frame, float]:
    """Fit ``frame`` into a ``size``×``size`` canvas, as FaceFusion's ``restrict_frame`` + padding do.

    A frame larger than ``size`` is shrunk keeping its aspect ratio; a smaller one keeps its size. The picture
    sits at the top-left and the rest is zero.

    Returns:
        The canvas (uint8 [size, size, 3]) and the scale: canvas pixels per frame pixel, so a point found on
        the canvas is ``point / scale`` in the frame.
    """
    height, width = frame.shape[:2]
    scale = min(size / height, size / width, 1.0)
    if scale < 1.0:
        resized_width = max(1, min(size, round(width * scale)))
        resized_height = max(1, min(size, round(height * scale)))
        frame = np.asarray(cv2.resize(frame, (resized_width, resized_height)), dtype=np.uint8)
    canvas = np.zeros((size, size, 3), dtype=np.uint8)
    canvas[: frame.shape[0], : frame.shape[1]] = frame
    return canvas, scale


DETECTORS: Mapping[Detector, DetectorSpec] = MappingProxyType(
    {
        "yunet": DetectorSpec("yunet", fixed_size=640, decode=decode_yunet, any_size=True),
        "scrfd": DetectorSpec("scrfd_2.5g", fixed_size=None, decode=decode_scrfd),
        "retinaface": DetectorSpec("retinaface_10g", fixed_size=None, decode=decode_scrfd),
        "yolo_face": DetectorSpec("yoloface_8n", fixed_size=640, decode=decode_yolo_face),
    }
)


class FaceDetector:
    """Finds faces in batches of frames with one detector model.

    The published detectors take batch 1, so :meth:`detect` runs the engine once per frame.

    Example:
        >>> detector = FaceDetector(engine, "yunet", score=0.5)   # doctest: +SKIP
        >>> faces_per_frame = detector.detect(frames)              # doctest: +SKIP
    """

    def __init__(
        self,
        engine: Engine,
        detector: Detector,
        *,
        size: int = 640,
        score: float = 0.5,
        input_size: int | None = None,
        at_once: bool = True,
    ) -> None:
        """Wrap a loaded detector model.

        Args:
            engine: the detector model, loaded.
            detector: which family it is; picks the normalisation and decoder from :data:`DETECTORS`.
            size: the detector size asked for (``FaceOptions.detector_size``): the frame is seen as if shrunk to
                fit a ``size``×``size`` square. A model that takes one input size only honours it all the same:
                a smaller size is letterboxed into its input, a larger one is detected in overlapping tiles
                (:meth:`detect_frame`).
            score: the minimum confidence kept.
            input_size: the model's square input; default: the family's fixed size, else ``size``.
            at_once: where the frame seen at ``size`` is larger than the input and the family's network takes any
                size (:attr:`DetectorSpec.any_size`), detect it in one run, not in tiles. Off for a caller that
                shares the tiles out over consecutive frames (strict mode's scan period): each frame then sees half
                the tiles, and their overlaps every frame.
        """
        self.spec = DETECTORS[detector]
        input_size = input_size or self.spec.fixed_size or size
        if size % 32 or input_size % 32:
            raise ValueError(f"detector size must be a multiple of 32, got {size}")
        self.engine = engine
        self.detector = detector
        self.size = input_size
        self.view = size
        self.score = score
        self.at_once = at_once
        self.runs, self._runs_lock = 0, threading.Lock()  # model runs so far (the detector calls events count)
        self._input_name = engine.input_names[0]

    @classmethod
    def load(cls, options: FaceOptions, settings: Settings) -> FaceDetector:
        """Load the detector ``options.detector`` (resolving and, if needed, downloading its model file).

        Raises:
            ModelError: the model file cannot be found or downloaded.
        """
        spec = DETECTORS[options.detector]
        size = spec.fixed_size or options.detector_size
        engine = OnnxEngine.load(resolve(spec.model, settings), settings, spatial_size=size, threads=DETECTOR_THREADS)
        height = engine.input_shape(engine.input_names[0])[2:3]
        if height and isinstance(height[0], int) and height[0] != size:
            # A file exported for one size only (some SCRFD exports): its input is that size, and the detector
            # size asked for is honoured by letterboxing or tiling into it.
            logger.info("detector %s is fixed at %s px; tiling or letterboxing into it", spec.model, height[0])
            size = height[0]
        return cls(engine, options.detector, size=options.detector_size, score=options.detector_score, input_size=size)

    def detect_frame(
        self,
        frame: Frame,
        score: float | None = None,
        *,
        whole_pass: bool = True,
        tiles: Sequence[bool] | None = None,
    ) -> list[Face]:
        """The faces in one BGR frame, highest score first, at or above ``score`` (default: the detector's).

        The frame is seen at the scale that fits it into a :attr:`view`-sided square (never enlarged). Where that
        is larger than the model's input, the scaled frame is detected in one run where the model takes any size
        (:attr:`at_once`), else cut into input-sized tiles overlapping by
        :data:`~workers.faces.tiling.TILE_OVERLAP` of a tile, each detected on its own; either way plus one pass
        over the whole frame shrunk into the input for faces larger than the overlap; a tile's faces that touch its
        inner edges are left to the tile (or the whole pass) that holds them entire, and the rest is merged by NMS.
        ``whole_pass=False`` leaves out the pass over the whole frame (for a caller that has run it already);
        ``tiles`` (one flag per run of :meth:`tile_runs`, in order) runs only the tiles flagged.
        """
        threshold = self.score if score is None else score
        height, width = frame.shape[:2]
        scale, (scaled_w, scaled_h) = seen_at(height, width, self.view)
        if scaled_w <= self.size and scaled_h <= self.size:
            if tiles is not None and not tiles[0]:
                return []
            found, found_scale = self._run(_fit(frame, scaled_w, scaled_h), threshold), scale
            return _faces(found, found_scale)
        scaled = _fit(frame, scaled_w, scaled_h)
        parts = [self._whole(frame, threshold, scale)] if whole_pass else []
        if self._at_once(scaled_w, scaled_h):
            if tiles is None or tiles[0]:
                found = self._run_at_once(scaled, threshold)
                parts.append(Detections(found.boxes / scale, found.scores, found.landmarks / scale))
            return _faces(_merged(parts, threshold), 1.0)
        due = [
            origin
            for number, origin in enumerate(tile_origins(scaled_w, scaled_h, self.size))
            if tiles is None or tiles[number]
        ]
        detected = list(tile_pool().map(lambda origin: self._infer(self._cut(scaled, origin), threshold), due))
        self.count_runs(len(due))
        for (x0, y0), tile in zip(due, detected, strict=True):
            inner = inside_tile(tile.boxes, x0, y0, self.size, scaled_w, scaled_h)
            offset = np.asarray([x0, y0], np.float32)
            parts.append(
                Detections(
                    (tile.boxes[inner] + np.tile(offset, 2)) / scale,
                    tile.scores[inner],
                    (tile.landmarks[inner] + offset) / scale,
                )
            )
        return _faces(_merged(parts, threshold), 1.0)

    def count_runs(self, runs: int) -> None:  # an anonymiser's sweep runs the model on several threads at once
        with self._runs_lock:
            self.runs += runs

    def tile_runs(self, height: int, width: int) -> int:
        """The model runs :meth:`detect_frame` makes on a ``height``×``width`` frame besides its whole pass: its
        tiles, or 1 where the frame fits the input whole."""
        _, (scaled_w, scaled_h) = seen_at(height, width, self.view)
        if (scaled_w <= self.size and scaled_h <= self.size) or self._at_once(scaled_w, scaled_h):
            return 1
        return len(tile_origins(scaled_w, scaled_h, self.size))

    def _at_once(self, width: int, height: int) -> bool:
        """Whether a ``width``×``height`` picture larger than the input is detected in one run, not in tiles: the
        family's network takes any size, the engine can free it, and the picture is at most
        :data:`~workers.faces.tiling.AT_ONCE_MOST` pixels."""
        return self.at_once and self.takes_any_size and width * height <= AT_ONCE_MOST

    @property
    def takes_any_size(self) -> bool:
        """Whether one run can take a picture of any size: the family's network does, and the engine can free it."""
        return self.spec.any_size and isinstance(self.engine, OnnxEngine)

    def _run_at_once(self, picture: Frame, threshold: float) -> Detections:
        """Detections in the whole of ``picture`` (zero-padded bottom/right to multiples of 32), in its coordinates:
        one run of the model with its spatial size freed."""
        assert isinstance(self.engine, OnnxEngine)
        engine = self.engine.any_size()
        height, width = (-(-side // 32) * 32 for side in picture.shape[:2])
        tensor = picture_to_tensor(picture, (height, width), self.spec.normalisation, self.spec.colour_order)
        outputs = engine.run({engine.input_names[0]: tensor})
        self.count_runs(1)
        return self.spec.decode(dict(zip(engine.output_names, outputs, strict=True)), (height, width), threshold)

    def _whole(self, frame: Frame, threshold: float, scale: float) -> Detections:
        """The whole frame shrunk into the model's input: its faces in frame coordinates."""
        canvas, whole_scale = letterbox(frame, self.size)
        found = self._run(canvas, threshold)
        return Detections(found.boxes / whole_scale, found.scores, found.landmarks / whole_scale)

    def run_picture(self, picture: Frame, threshold: float) -> Detections:
        """Detections in ``picture`` (zero-padded bottom/right), in its coordinates: one model run. A picture larger
        than the model's input is run whole where the model takes any size (:attr:`takes_any_size`).

        Raises:
            ValueError: the picture is larger than the input of a model that takes one size only.
        """
        if picture.shape[0] > self.size or picture.shape[1] > self.size:
            if not self.takes_any_size:
                raise ValueError(f"a {picture.shape[1]}x{picture.shape[0]} picture for a {self.size}-px input")
            return self._run_at_once(picture, threshold)
        return self._run(picture, threshold)

    def _run(self, picture: Frame, threshold: float) -> Detections:
        """Detections in ``picture`` (at most the input size; zero-padded bottom/right), in its coordinates."""
        self.count_runs(1)
        return self._infer(picture, threshold)

    def _cut(self, picture: Frame, origin: tuple[int, int]) -> Frame:
        x0, y0 = origin
        return picture[y0 : y0 + self.size, x0 : x0 + self.size]

    def _infer(self, picture: Frame, threshold: float) -> Detections:
        """:meth:`_run` without counting the run (safe on the tile threads: the caller counts)."""
        tensor = picture_to_tensor(picture, self.size, self.spec.normalisation, self.spec.colour_order)
        outputs = self.engine.run({self._input_name: tensor})
        named = dict(zip(self.engine.output_names, outputs, strict=True))
        return self.spec.decode(named, self.size, threshold)

    def detect(self, frames: npt.NDArray[np.uint8] | Sequence[Frame], score: float | None = None) -> list[list[Face]]:
        """The faces of each frame of a batch (uint8 [N, H, W, 3] BGR), one list per frame, in order."""
        return [self.detect_frame(frame, score) for frame in frames]


def _fit(frame: Frame, width: int, height: int) -> Frame:
    if (height, width) == frame.shape[:2]:
        return frame
    return np.asarray(cv2.resize(frame, (width, height)), dtype=np.uint8)


def _merged(parts: Sequence[Detections], threshold: float) -> Detections:
    return suppress_detections(
        np.concatenate([p.boxes for p in parts]),
        np.concatenate([p.scores for p in parts]),
        np.concatenate([p.landmarks for p in parts]),
        threshold,
    )


def _faces(found: Detections, scale: float) -> list[Face]:
    boxes = found.boxes / scale
    landmarks = found.landmarks / scale
    return [
        Face(box=box.astype(np.float32), landmarks=points.astype(np.float32), score=float(score))
        for box, points, score in zip(boxes, landmarks, found.scores, strict=True)
    ]


def suppress_faces(faces: Sequence[Face], threshold: float) -> list[Face]:
    """``faces`` (found by several passes over one frame) after NMS at IoU :data:`NMS_THRESHOLD`, highest score
    first; those below ``threshold`` dropped."""
    if not faces:
        return []
    merged = suppress_detections(
        np.stack([f.box for f in faces]).astype(np.float32),
        np.asarray([f.score for f in faces], np.float32),
        np.stack([f.landmarks for f in faces]).astype(np.float32),
        threshold,
    )
    return _faces(merged, 1.0)
