"""Crops gathered and pasted back by the torch frame back-end (here on CPU tensors) give the host back-end's crops
and frames: ≥ 40 dB PSNR per crop and per frame on d18 and crowd_1080p, with a stand-in model that changes every
crop (its colours inverted)."""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from shared.options import FaceOptions
from tests.support.faces import cpu_settings
from workers.faces.alignment import box_mask
from workers.faces.cropping import gather_crops
from workers.faces.detection import FaceDetector
from workers.frames.host import HostBackend
from workers.frames.torch import TorchBackend

SIZE = 128


def _frames(clip: Path, count: int, step: int) -> np.ndarray:
    capture = cv2.VideoCapture(str(clip))
    frames = []
    index = 0
    while len(frames) < count:
        ok, frame = capture.read()
        assert ok
        if index % step == 0:
            frames.append(frame)
        index += 1
    return np.stack(frames)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.mark.parametrize(("clip", "count", "step"), [("d18.mp4", 8, 25), ("crowd_1080p.mp4", 4, 30)])
def test_crops_and_paste_back_on_the_device_agree_with_the_host_path(
    clip: str, count: int, step: int, data_dir: Path, tmp_path: Path
) -> None:
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", tmp_path / "yunet_2023_mar.onnx")
    detector = FaceDetector.load(
        FaceOptions(), cpu_settings(tmp_path, models_dir=tmp_path, allow_model_hash_mismatch=True)
    )
    frames = _frames(data_dir / "media" / clip, count, step)
    faces = detector.detect(frames)
    mask = box_mask(SIZE, 0.3)
    gathered = gather_crops(frames, faces, "arcface_128", SIZE)
    assert len(gathered) >= count
    host_backend = HostBackend()
    host_batch = host_backend.frames(bgr=frames.copy())
    assert np.array_equal(host_backend.crops(host_batch, gathered.transforms, gathered.frame_indices, SIZE),
                          gathered.crops)  # fmt: skip
    host_backend.paste(host_batch, 255 - gathered.crops, gathered.transforms, gathered.frame_indices, mask)
    host = host_batch.bgr
    assert host is not None

    backend = TorchBackend("cpu")
    batch = backend.frames(bgr=torch.from_numpy(frames.copy()))
    ours = backend.crops(batch, gathered.transforms, gathered.frame_indices, SIZE)
    for index in range(len(ours)):
        assert _psnr(ours[index], gathered.crops[index]) >= 40, f"crop {index}"
    backend.paste(batch, 255 - ours, gathered.transforms, gathered.frame_indices, mask)
    result = backend.download(backend.ensure_bgr(batch))
    for index in range(count):
        assert _psnr(result[index], host[index]) >= 40, f"frame {index}"
        assert _psnr(result[index], frames[index]) < 40, f"frame {index}: no face changed"
