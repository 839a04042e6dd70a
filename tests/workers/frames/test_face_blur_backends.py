"""``face_blur`` written once (workers/processors/face_blur.py ``hide_faces``) on every frame back-end, from the
decoder's 4:2:0 planes on real footage: within 40 dB of the OpenCV path's frames (converted whole to BGR and back),
the faces really hidden, every pixel outside the faces' 2x2 blocks as decoded; with the BGR view kept in step for a
later processor of the chain, the host back-end's BGR is the OpenCV path's to the bit.

(Merged here: the device path's face_blur and pixelate tests, tests/workers/frames/test_torch.py, and the GPU's
face_blur test, tests/workers/engines/test_gpu.py, which is the torch-cuda case.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.options import BlurStyle, FaceOptions
from shared.processes import child_env
from tests.support.faces import cpu_settings
from tests.support.media import psnr
from workers.faces.detection import FaceDetector
from workers.frames.backend import FrameBackend
from workers.frames.host import HostBackend
from workers.processors.face_blur import blur_faces, grown_region, hide_faces
from workers.video.ffmpeg import decode_args

torch = pytest.importorskip("torch")
pytest.importorskip("kornia")

from workers.frames.torch import TorchBackend  # noqa: E402  (torch is optional)

STRENGTH = 0.5


@pytest.fixture(
    params=[
        pytest.param("host", id="host"),
        pytest.param("cpu", id="torch-cpu"),
        pytest.param(
            "cuda",
            id="torch-cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU lent to this run"),
        ),
    ]
)
def backend(request: pytest.FixtureRequest) -> FrameBackend[object]:
    return HostBackend() if request.param == "host" else TorchBackend(request.param)  # type: ignore[return-value]


@pytest.fixture(scope="module")
def detector(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> FaceDetector:
    models = tmp_path_factory.mktemp("models")
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    settings = cpu_settings(models, models_dir=models, allow_model_hash_mismatch=True)
    return FaceDetector.load(FaceOptions(), settings)


def _planes(clip: Path, frames: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    width, height = (int(v) for v in subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width,height", "-of", "csv=p=0",
         str(clip)], capture_output=True, text=True, check=True,
    ).stdout.strip().split(","))  # fmt: skip
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, height * 3 // 2, width).copy()


@pytest.mark.parametrize(
    ("clip", "frames", "style", "margin"),
    [
        ("d18.mp4", 6, "blur", 0.0),
        ("crowd_1080p.mp4", 3, "blur", 0.0),
        ("d18.mp4", 4, "pixelate", 0.2),
        ("crowd_1080p.mp4", 2, "pixelate", 0.0),
        ("d18.mp4", 3, "fill", 0.25),
    ],
)
def test_face_blur_from_planes_agrees_with_the_opencv_path(
    backend: FrameBackend[object],
    clip: str,
    frames: int,
    style: BlurStyle,
    margin: float,
    detector: FaceDetector,
    data_dir: Path,
) -> None:
    planes = _planes(data_dir / "media" / clip, frames)
    bgr = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(bgr)
    assert sum(len(found) for found in faces) >= frames, "faces found to hide"
    opencv = np.stack([
        cv2.cvtColor(blur_faces(frame, found, STRENGTH, style=style, margin=margin), cv2.COLOR_BGR2YUV_I420)
        for frame, found in zip(bgr, faces, strict=True)
    ])  # fmt: skip
    batch = backend.frames(planes=backend.upload(planes.copy()))  # the host back-end works in place
    hide_faces(backend, batch, faces, STRENGTH, style=style, margin=margin)
    assert batch.planes is not None and batch.bgr is None, "only the faces' regions were converted"
    out = backend.download(batch.planes)
    assert out.shape == planes.shape and out.dtype == np.uint8
    height, width = bgr.shape[1:3]
    for index in range(frames):
        assert psnr(out[index], opencv[index]) >= 40, f"frame {index}"
        inside, widened = np.zeros((height, width), bool), np.zeros((height, width), bool)
        for face in faces[index]:
            x1, y1, x2, y2 = grown_region(face, margin, (height, width))
            inside[y1:y2, x1:x2] = True
            widened[y1 & ~1 : (y2 + 1) & ~1, x1 & ~1 : (x2 + 1) & ~1] = True
        luma, before = out[index, :height], planes[index, :height]
        assert np.array_equal(luma[~widened], before[~widened]), f"frame {index}: pixels outside the faces changed"
        if inside.any():
            assert psnr(luma[inside], before[inside]) < 35, f"frame {index}: faces not hidden"


@pytest.mark.parametrize(("style", "margin"), [("pixelate", 0.2), ("blur", 0.0)])
def test_the_bgr_view_kept_in_step_is_the_opencv_paths(
    backend: FrameBackend[object], style: BlurStyle, margin: float, detector: FaceDetector, data_dir: Path
) -> None:
    """A later processor of the chain reads the BGR view: the host back-end's is the OpenCV path's frames to the
    bit (the same kernels on the same pixels), torch's within 40 dB, and the planes are that view's."""
    planes = _planes(data_dir / "media" / "d18.mp4", 4)
    bgr = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(bgr)
    opencv = np.stack([
        blur_faces(frame, found, STRENGTH, style=style, margin=margin) for frame, found in zip(bgr, faces, strict=True)
    ])  # fmt: skip
    batch = backend.frames(planes=backend.upload(planes.copy()), bgr=backend.upload(bgr.copy()))
    hide_faces(backend, batch, faces, STRENGTH, style=style, margin=margin)
    assert batch.bgr is not None and batch.planes is not None
    view = backend.download(batch.bgr)
    if isinstance(backend, HostBackend):
        assert np.array_equal(view, opencv)
    for index in range(len(planes)):
        assert psnr(view[index], opencv[index]) >= 40, f"frame {index}"
    expected = np.stack([cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_BGR2YUV_I420) for frame in view])
    assert np.array_equal(backend.download(batch.planes), expected)
