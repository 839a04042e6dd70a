"""On a GPU host: the frame feed on the torch back-end moves frames through page-locked (pinned) host memory, once each
way, and the detector compiled for the GPU (an ordinary torch engine) finds the faces the eager one finds. Skipped,
with the reason in the summary (``-ra``), where torch sees no CUDA or ROCm device."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from shared.options import FaceOptions
from shared.processes import child_env
from tests.support.faces import cpu_settings, same_faces
from workers.faces.detection import FaceDetector
from workers.faces.device_detection import DeviceDetector, converted_engine
from workers.frames.feed import FrameFeed
from workers.frames.torch import TorchBackend
from workers.video.ffmpeg import decode_args

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"no GPU: torch {torch.__version__} sees no CUDA or ROCm device",
    ),
]


def _planes(data_dir: Path, frames: int) -> np.ndarray:
    clip = data_dir / "media" / "crowd_1080p.mp4"
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, 1620, 1920).copy()


def test_the_feed_moves_frames_through_pinned_memory_once_each_way(data_dir: Path) -> None:
    planes = _planes(data_dir, 6)
    feed = FrameFeed(TorchBackend("cuda"))
    yielded = []
    for batch in feed.frames([planes[:4].copy(), planes[4:].copy()]):
        assert torch.from_numpy(batch).is_pinned(), "the BGR came down into page-locked memory"
        on_device = feed.on_device(batch)
        assert on_device is not None and on_device.is_cuda
        yielded.append((batch, on_device))
    reference = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    assert np.array_equal(np.concatenate([batch for batch, _ in yielded]), reference)
    taken = feed.take(yielded[0][0])
    assert taken.planes.is_cuda and taken.bgr.data_ptr() == yielded[0][1].data_ptr()  # no second upload
    back = feed.backend.download(taken.planes)
    assert torch.from_numpy(back).is_pinned() and np.array_equal(back, planes[:4])
    assert feed.counts.uploaded == feed.counts.downloaded == 6


def test_the_compiled_detector_finds_the_faces_the_eager_one_finds(data_dir: Path, tmp_path: Path) -> None:
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", tmp_path / "yunet_2023_mar.onnx")
    host = FaceDetector.load(FaceOptions(), cpu_settings(tmp_path, models_dir=tmp_path, allow_model_hash_mismatch=True))
    model = data_dir / "models" / "yunet_2023mar.onnx"
    eager = DeviceDetector(host, converted_engine(model, "cuda"))
    # reduce-overhead: compiled with CUDA graphs, as max-autotune (the GPU's default) is, without its autotuning
    compiled = DeviceDetector(host, converted_engine(model, "cuda", mode="reduce-overhead", max_batch=4))
    planes = _planes(data_dir, 6)  # 6 frames: buckets of 4 and 2
    frames = torch.from_numpy(np.stack([cv2.cvtColor(f, cv2.COLOR_YUV2BGR_I420) for f in planes])).cuda()
    expected = eager.detect(frames)
    for _ in range(2):  # the second run replays the recorded graphs
        found = compiled.detect(frames)
        assert compiled.compiled, compiled.converted.stats.fallback_reason
        assert same_faces(found, expected) >= 6, "faces to compare"
