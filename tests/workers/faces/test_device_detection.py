"""The detectors converted to torch (run by an ordinary torch engine: the chain's detection on a torch device) find
the faces ONNX Runtime finds: same count, boxes and landmarks within a hundredth of a pixel, on real footage."""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
import torch

from shared.options import Detector, FaceOptions, JobOptions
from shared.processes import child_env
from shared.settings import CompileMode
from tests.support.faces import cpu_settings, same_faces
from workers import degradations
from workers.engines.choosing import compile_mode
from workers.engines.compiling import Compiled
from workers.faces.batched_decoding import DECODERS, survivors
from workers.faces.decoding import STRIDES, decode_scrfd, decode_yolo_face, decode_yunet
from workers.faces.detection import FaceDetector
from workers.faces.device_detection import (
    DETECTION_FALLBACK,
    EAGER_FALLBACK,
    DeviceDetector,
    converted_engine,
    detection_mode,
    device_detector,
)
from workers.video.ffmpeg import decode_args

# (family, test file, the registry's file name): SCRFD-500M has scrfd_2.5g's layout (the data folder's README)
CASES = [("yunet", "yunet_2023mar.onnx", "yunet_2023_mar.onnx"), ("scrfd", "scrfd_500m_bnkps.onnx", "scrfd_2.5g.onnx")]


def _frames(clip: Path, frames: int, width: int, height: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    planes = np.frombuffer(raw.stdout, np.uint8).reshape(frames, height * 3 // 2, width)
    return np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])


@pytest.mark.parametrize(("family", "file", "registry_file"), CASES)
def test_a_converted_detector_finds_the_faces_onnx_runtime_finds(
    family: str, file: str, registry_file: str, data_dir: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(data_dir / "models" / file, models / registry_file)
    options = FaceOptions.model_validate({"detector": family})
    host = FaceDetector.load(options, cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True))
    device = FaceDetector(
        converted_engine(data_dir / "models" / file), host.detector, size=host.view, score=host.score,
        input_size=host.size,
    )  # fmt: skip
    frames = _frames(data_dir / "media" / "crowd_1080p.mp4", 2, 1920, 1080)
    expected, found = host.detect(frames), device.detect(frames)
    assert sum(len(faces) for faces in expected) >= 4, "faces to compare"
    for ours, theirs in zip(found, expected, strict=True):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            assert np.abs(a.box - b.box).max() < 0.01 and np.abs(a.landmarks - b.landmarks).max() < 0.01
            assert abs(a.score - b.score) < 1e-4


def _detectors(
    family: str, file: str, registry_file: str, data_dir: Path, models: Path
) -> tuple[FaceDetector, DeviceDetector]:
    shutil.copy(data_dir / "models" / file, models / registry_file)
    options = FaceOptions.model_validate({"detector": family})
    host = FaceDetector.load(options, cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True))
    return host, DeviceDetector(host, converted_engine(data_dir / "models" / file))


@pytest.mark.parametrize(("family", "file", "registry_file"), CASES)
def test_detection_on_the_device_finds_the_faces_the_host_finds(
    family: str, file: str, registry_file: str, data_dir: Path, tmp_path: Path
) -> None:
    """Letterbox, batched model, decode and NMS in torch: the same faces as the host's OpenCV/numpy route with
    ONNX Runtime, boxes and landmarks within half a pixel, scores within 1e-3, on a 1080p crowd (shrunk to fit),
    a 480p clip (padded) and a group photo."""
    host, device = _detectors(family, file, registry_file, data_dir, tmp_path)
    photo = np.asarray(cv2.imread(str(data_dir / "media" / "group6.jpg")), np.uint8)
    batches = [
        _frames(data_dir / "media" / "crowd_1080p.mp4", 3, 1920, 1080),
        _frames(data_dir / "media" / "d18.mp4", 2, 480, 480),
        photo[None, : photo.shape[0] // 2 * 2, : photo.shape[1] // 2 * 2],
    ]
    compared = 0
    for frames in batches:
        expected = host.detect(frames)
        found = device.detect(torch.from_numpy(frames))  # as the torch back-end holds them
        compared += same_faces(found, expected)
    assert device.batches == len(batches)
    assert compared >= 15, "faces to compare"


@pytest.mark.parametrize("family", ["yunet", "scrfd", "yolo_face"])
def test_the_torch_decoders_decode_as_the_host_decoders_do(family: Detector) -> None:
    """Every family's batched torch decode + NMS gives the host decoder's detections frame by frame (retinaface
    shares SCRFD's decoder on both sides), on outputs dense with overlapping candidates."""
    rng = np.random.default_rng(7)
    size, batch = 128, 3
    if family == "yolo_face":
        anchors = sum((size // s) ** 2 for s in STRIDES)
        rows = rng.uniform(0.0, 1.0, (batch, 20, anchors)).astype(np.float32)
        rows[:, :2] *= size
        rows[:, 2:4] *= 40
        rows[:, 5:] *= size
        outputs = {"output0": rows}
    else:
        anchors, kinds = (1, ["cls", "obj", "bbox", "kps"]) if family == "yunet" else (2, ["score", "bbox", "kps"])
        widths = {"cls": 1, "obj": 1, "score": 1, "bbox": 4, "kps": 10}
        outputs = {
            f"{kind}_{s}": rng.uniform(0.0, 1.0 if kind != "bbox" or family == "yunet" else 3.0,
                                       (batch, (size // s) ** 2 * anchors, widths[kind])).astype(np.float32)
            for s in STRIDES for kind in kinds
        }  # fmt: skip
    host_decode = {"yunet": decode_yunet, "scrfd": decode_scrfd, "yolo_face": decode_yolo_face}[family]
    found = survivors(DECODERS[family]({k: torch.from_numpy(v) for k, v in outputs.items()}, batch, size), 0.5)
    kept = 0
    for frame in range(batch):
        expected = host_decode({k: v[frame : frame + 1] for k, v in outputs.items()}, size, 0.5)
        ours = found[frame]
        assert len(ours.scores) == len(expected.scores) > 0
        np.testing.assert_allclose(ours.scores.numpy(), expected.scores, atol=1e-6)
        np.testing.assert_allclose(ours.boxes.numpy(), expected.boxes, atol=1e-3)
        np.testing.assert_allclose(ours.landmarks.numpy(), expected.landmarks, atol=1e-3)
        kept += len(ours.scores)
    assert kept > batch


def test_a_detector_the_converter_cannot_take_detects_on_the_host_and_the_job_is_told(
    data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No silent fallback: a graph with an operator the converter lacks leaves detection on the host with a
    degradation (the job's warning, a log line, the metric's count)."""
    host, _ = _detectors("yunet", "yunet_2023mar.onnx", "yunet_2023_mar.onnx", data_dir, tmp_path)
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Hardmax", ["input"], ["cls_8"])],
        "unconvertible",
        [onnx.helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, [1, 3, 640, 640])],
        [onnx.helper.make_tensor_value_info("cls_8", onnx.TensorProto.FLOAT, [1, 3, 640, 640])],
    )
    onnx.save(onnx.helper.make_model(graph), tmp_path / "yunet_2023_mar.onnx")  # the file the job resolves
    settings = cpu_settings(tmp_path, models_dir=tmp_path, allow_model_hash_mismatch=True)
    options = JobOptions.model_validate({"processors": ["face_blur"]})
    before = _degradations(DETECTION_FALLBACK)
    with degradations.collecting() as found, caplog.at_level(logging.WARNING):
        assert device_detector(host, settings, options, "cpu", width=480, height=480) is None
    told = [n for n in found if n.code == DETECTION_FALLBACK]  # beside any provider fallback of the host's engine
    assert len(told) == 1
    assert "cannot be converted" in told[0].message and "Hardmax" in told[0].message
    assert any(f"degraded ({DETECTION_FALLBACK})" in r.getMessage() for r in caplog.records)
    assert _degradations(DETECTION_FALLBACK) == before + 1


def _degradations(code: str) -> float:
    """``swapfarm_degradations_total{code}`` as the worker's metrics endpoint exports it."""
    (family,) = degradations.DegradationCollector().collect()
    return sum(s.value for s in family.samples if s.labels == {"code": code} and s.name.endswith("_total"))


def _failing_compiler(module: torch.nn.Module, mode: CompileMode) -> Compiled:
    """A compile that fails as Inductor's do: lazily, on the first call of a shape."""

    def compiled(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raise RuntimeError(f"inductor could not lower the graph ({mode})")

    return compiled


def test_a_detector_whose_compile_fails_runs_eagerly_and_the_job_is_told(
    data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No silent fallback: the compiled detector that fails on its first batch finds the eager model's faces, runs
    eagerly from then on, and says so once (the job's warning, a log line, the metric's count)."""
    host, eager = _detectors("yunet", "yunet_2023mar.onnx", "yunet_2023_mar.onnx", data_dir, tmp_path)
    converted = converted_engine(data_dir / "models" / "yunet_2023mar.onnx", mode="default", compiler=_failing_compiler)
    frames = torch.from_numpy(_frames(data_dir / "media" / "d18.mp4", 3, 480, 480))
    before = _degradations(EAGER_FALLBACK)
    with degradations.collecting() as found, caplog.at_level(logging.WARNING):
        device = DeviceDetector(host, converted)
        assert device.compiled
        first, second = device.detect(frames), device.detect(frames)
    expected = eager.detect(frames)
    assert [[f.box.tolist() for f in faces] for faces in first] == [
        [f.box.tolist() for f in faces] for faces in expected
    ]
    assert second and not device.compiled
    told = [n for n in found if n.code == EAGER_FALLBACK]
    assert len(told) == 1 and "torch.compile failed" in told[0].message and "inductor" in told[0].message
    assert any(f"degraded ({EAGER_FALLBACK})" in r.getMessage() for r in caplog.records)
    assert _degradations(EAGER_FALLBACK) == before + 1


def test_the_detector_compiles_on_a_gpu_as_the_swapper_does_and_stays_eager_on_the_cpu() -> None:
    settings = cpu_settings()
    assert detection_mode(settings, "cpu", "cpu") == "eager"
    assert detection_mode(settings.model_copy(update={"torch_compile_mode": "max-autotune"}), "cpu", "cpu") == "eager"
    assert detection_mode(settings, "cuda", "cuda") == compile_mode(settings, "cuda") == "max-autotune"
    assert detection_mode(settings, "cuda:1", "rocm") == "max-autotune"
    chosen = settings.model_copy(update={"torch_compile_mode": "reduce-overhead"})
    assert detection_mode(chosen, "cuda", "cuda") == "reduce-overhead"
