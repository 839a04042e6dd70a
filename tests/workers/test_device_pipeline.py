"""The device path (torch, here on the CPU as in CI) gives the frames the OpenCV/numpy path gives: ≥ 40 dB PSNR
per frame on real footage, with faces really blurred."""

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
from tests.support.faces import cpu_settings
from workers.device.blurring import _reflect101, gaussian_kernel
from workers.device.colour import bgr_to_yuv420, yuv420_to_bgr, yuv420_to_bgr_hwc
from workers.device.pipeline import DeviceBlur
from workers.faces.detection import FaceDetector
from workers.processors.face_blur import blur_faces, face_region
from workers.video.ffmpeg import decode_args

STRENGTH = 0.5


def _planes(clip: Path, frames: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    width, height = (int(v) for v in subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0",
         str(clip)], capture_output=True, text=True, check=True,
    ).stdout.strip().split(","))  # fmt: skip
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, height * 3 // 2, width).copy()


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


@pytest.fixture(scope="module")
def detector(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> FaceDetector:
    models = tmp_path_factory.mktemp("models")
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    settings = cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True)
    return FaceDetector.load(FaceOptions(), settings)


def test_opencvs_kernels_and_border_are_the_ones_the_device_blurs_with() -> None:
    for side in (3, 5, 7, 9, 11, 31, 151):
        expected = cv2.getGaussianKernel(side, 0).ravel()
        assert np.allclose(gaussian_kernel(side, torch.device("cpu")).numpy(), expected, atol=1e-6), side
    # gfedcb|abcdefgh|gfedcba, also when the border is longer than the side
    assert _reflect101(4, 5, torch.device("cpu")).tolist() == [1, 2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1, 2]


def test_colour_conversion_is_opencvs_to_the_bit_both_ways(data_dir: Path) -> None:
    # the same pixels on both paths: the detector finds the same faces, the encoder gets the same frames
    for clip, frames in (("d18.mp4", 4), ("crowd_1080p.mp4", 2)):
        planes = _planes(data_dir / "media" / clip, frames)
        reference = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
        assert np.array_equal(yuv420_to_bgr_hwc(torch.from_numpy(planes)).numpy(), reference), clip
        assert np.array_equal(yuv420_to_bgr(torch.from_numpy(planes)).permute(0, 2, 3, 1).numpy(), reference), clip
        noisy = np.random.default_rng(0).integers(0, 256, reference.shape, dtype=np.uint8)  # chroma varies in blocks
        for frame_set in (reference, noisy):
            back = bgr_to_yuv420(torch.from_numpy(frame_set).permute(0, 3, 1, 2).float()).numpy()
            expected = np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2YUV_I420) for frame in frame_set])
            assert np.array_equal(back, expected), clip


@pytest.mark.parametrize(("clip", "frames"), [("d18.mp4", 12), ("crowd_1080p.mp4", 6)])
def test_face_blur_on_the_device_agrees_with_the_opencv_path(
    clip: str, frames: int, detector: FaceDetector, data_dir: Path
) -> None:
    planes = _planes(data_dir / "media" / clip, frames)
    host_frames = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(host_frames)
    host = np.stack([
        cv2.cvtColor(blur_faces(frame, found, STRENGTH), cv2.COLOR_BGR2YUV_I420)
        for frame, found in zip(host_frames, faces, strict=True)
    ])  # fmt: skip
    device = DeviceBlur(detector.detect, strength=STRENGTH, device="cpu")(planes)
    assert device.shape == planes.shape and device.dtype == np.uint8
    assert sum(len(found) for found in faces) >= frames, "faces found to blur"
    height = host_frames.shape[1]
    for index in range(frames):
        assert _psnr(device[index], host[index]) >= 40, f"frame {index}"
        inside = np.zeros(host_frames.shape[1:3], bool)
        for face in faces[index]:
            x1, y1, x2, y2 = face_region(face, host_frames.shape[1:3])
            inside[y1:y2, x1:x2] = True
        luma, before = device[index, :height], planes[index, :height]
        widened = np.zeros_like(inside)  # to whole 2×2 chroma blocks
        for face in faces[index]:
            x1, y1, x2, y2 = face_region(face, host_frames.shape[1:3])
            widened[y1 & ~1 : (y2 + 1) & ~1, x1 & ~1 : (x2 + 1) & ~1] = True
        assert np.array_equal(luma[~widened], before[~widened]), f"frame {index}: pixels outside the faces changed"
        if inside.any():
            assert _psnr(luma[inside], before[inside]) < 35, f"frame {index}: faces not blurred"
