"""The detectors converted to torch (the device path's detection, first step) find the faces ONNX Runtime finds:
same count, boxes and landmarks within a hundredth of a pixel, on real footage."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.options import FaceOptions
from shared.processes import child_env
from tests.support.faces import cpu_settings
from workers.device.detection import ConvertedDetector
from workers.faces.detection import FaceDetector
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
        ConvertedDetector(data_dir / "models" / file), host.detector, size=host.view, score=host.score,
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
