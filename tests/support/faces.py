"""Helpers for the face tests: the reference data's frames and images, CPU settings, and loaded engines.

Frames and engines are cached per test process: decoding a clip (as far as the tests ask) or building an ONNX
Runtime session once is enough for every test that reads it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

from shared.settings import Settings
from tests.support.data import DATA
from workers.engines.onnx import OnnxEngine
from workers.faces.detection import Face, FaceDetector

MODELS = DATA / "models"
MEDIA = DATA / "media"

Frames = npt.NDArray[np.uint8]


def cpu_settings(tmp: Path | None = None, **overrides: object) -> Settings:
    """Settings for a CPU-only test worker; the model cache under ``tmp`` (never the user's own cache)."""
    values: dict[str, object] = {
        "environment": "test",
        "family": "cpu",
        "execution_providers": ["CPUExecutionProvider"],
        "model_cache_dir": (tmp or Path("/nonexistent")) / "model-cache",
        "model_base_urls": [],
    }
    values.update(overrides)
    return Settings.model_validate(values)


_decoded: dict[str, tuple[Frames, bool]] = {}
"""Per clip, the frames decoded so far from its start, and whether they are all of it."""


def _first_frames(name: str, count: int | None) -> Frames:
    """The clip's first ``count`` frames (all of them where ``None``), read-only. A clip is decoded only as far as
    a test has asked (most ask for a few frames of the start), once per process unless a later test asks further."""
    frames, whole = _decoded.get(name, (None, False))
    if frames is not None and (whole or (count is not None and len(frames) >= count)):
        return frames if count is None else frames[:count]
    capture = cv2.VideoCapture(str(MEDIA / name))
    decoded = []
    try:
        while count is None or len(decoded) < count:
            ok, frame = capture.read()
            if not ok:
                break
            decoded.append(frame)
    finally:
        capture.release()
    if not decoded:
        raise FileNotFoundError(f"no frames decoded from {MEDIA / name}")
    frames = np.asarray(np.stack(decoded), dtype=np.uint8)
    frames.setflags(write=False)
    _decoded[name] = (frames, count is None or len(decoded) < count)
    return frames


def _frames_needed(indices: Sequence[int] | slice | None) -> int | None:
    """How many frames from the start ``indices`` reach into (``None``: it can only be known from the clip's end)."""
    if indices is None:
        return None
    if isinstance(indices, slice):
        start, stop, step = indices.start or 0, indices.stop, indices.step or 1
        if stop is None or stop < 0 or start < 0 or step < 0:
            return None
        return stop
    if any(index < 0 for index in indices):
        return None
    return max(indices, default=-1) + 1


def clip_frames(name: str, indices: Sequence[int] | slice | None = None) -> Frames:
    """Frames of a reference clip (``d18.mp4`` …) as uint8 [N, H, W, 3] BGR; a writable copy."""
    frames = _first_frames(name, _frames_needed(indices))
    return np.array(frames if indices is None else frames[indices])


def image(name: str) -> Frames:
    """A reference image (``group6.jpg`` …) as uint8 [H, W, 3] BGR."""
    picture = cv2.imread(str(MEDIA / name))
    if picture is None:
        raise FileNotFoundError(MEDIA / name)
    return np.asarray(picture, dtype=np.uint8)


@cache
def engine(path: Path) -> OnnxEngine:
    """An ONNX Runtime engine on the CPU for the model file at ``path``."""
    return OnnxEngine.load(path, cpu_settings())


def detector(kind: str = "yunet", score: float = 0.5) -> FaceDetector:
    """A detector on a reference model: ``yunet`` (yunet_2023mar) or ``scrfd`` (scrfd_500m_bnkps, 640 px)."""
    files = {"yunet": "yunet_2023mar.onnx", "scrfd": "scrfd_500m_bnkps.onnx"}
    return FaceDetector(engine(MODELS / files[kind]), "yunet" if kind == "yunet" else "scrfd", size=640, score=score)


def psnr(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """Peak signal-to-noise ratio of two uint8 images, in dB (infinite for identical images)."""
    error = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return float("inf") if error == 0 else float(10 * np.log10(255.0**2 / error))


def same_faces(found: Sequence[Sequence[Face]], expected: Sequence[Sequence[Face]]) -> int:
    """Assert that two detections of the same frames agree face for face (boxes and landmarks within half a pixel,
    scores within 1e-3); how many faces were compared."""
    compared = 0
    for ours, theirs in zip(found, expected, strict=True):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert np.abs(a.box - b.box).max() < 0.5 and np.abs(a.landmarks - b.landmarks).max() < 0.5
            assert abs(a.score - b.score) < 1e-3
            compared += 1
    return compared
