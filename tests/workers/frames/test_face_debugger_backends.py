"""``face_debugger``'s marks drawn once (workers/processors/face_debugger.py ``FaceDebuggerProcessor.draw``) on every
frame back-end, from the decoder's planes with the BGR view: the same pixels in the same colours as the OpenCV
path's frames (drawn whole with ``draw_faces``), boxes, five and 68 points and scores, also where one face's marks
cross another's; the planes rewritten only where marks are, as the whole frame converts.

(Merged here: the device path's debugger tests of tests/workers/frames/test_torch.py; the device's own
rasteriser, whose pixel-by-pixel tests went with it, is gone: the marks are drawn on the host.)"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.options import FaceOptions
from shared.processes import child_env
from tests.support import mask_replicas
from tests.support.faces import cpu_settings, engine
from tests.support.media import psnr
from tests.support.replicas import install_replica
from workers.faces.detection import Face, FaceDetector
from workers.faces.landmarks import FaceLandmarker
from workers.frames.backend import FrameBackend
from workers.frames.host import HostBackend
from workers.processors.face_debugger import BOX_COLOUR, FaceDebuggerProcessor, Located, draw_faces
from workers.video.ffmpeg import decode_args

torch = pytest.importorskip("torch")
pytest.importorskip("kornia")

from workers.frames.torch import TorchBackend  # noqa: E402  (torch is optional)


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


def _planes(clip: Path, frames: int, width: int, height: int) -> np.ndarray:
    raw = subprocess.run(decode_args(clip, 0, frames, "yuv420p"), capture_output=True, check=True, env=child_env())
    return np.frombuffer(raw.stdout, np.uint8).reshape(frames, height * 3 // 2, width).copy()


def _shifted(face: Face, dx: float, dy: float) -> Face:
    step = np.array([dx, dy], np.float32)
    return Face(box=face.box + np.tile(step, 2), landmarks=face.landmarks + step, score=face.score * 0.9)


@pytest.mark.parametrize(("clip", "frames", "size"), [("d18.mp4", 6, (480, 480)), ("crowd_1080p.mp4", 2, (1920, 1080))])
def test_the_debuggers_marks_are_the_opencv_paths_on_every_back_end(
    backend: FrameBackend[object],
    clip: str,
    frames: int,
    size: tuple[int, int],
    detector: FaceDetector,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    planes = _planes(data_dir / "media" / clip, frames, *size)
    bgr = np.stack([cv2.cvtColor(frame, cv2.COLOR_YUV2BGR_I420) for frame in planes])
    faces = detector.detect(bgr)
    assert sum(len(found) for found in faces) >= frames, "faces found to draw"
    # the mean shape lifted from each face's five points: 68 real-looking points, some under the box
    lift = engine(install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", tmp_path))
    found = FaceLandmarker(lift, None, min_score=0.0).landmarks(bgr, faces)
    points: list[list[np.ndarray]] = [[] for _ in faces]
    start = 0
    for index, count in enumerate(len(f) for f in faces):
        points[index], start = list(found.points[start : start + count]), start + count
    cases = [(faces, points)]
    if clip == "d18.mp4":  # the face, and a copy whose box's top crosses its eyes: drawn in the host's order
        moved = [[*f, *(_shifted(face, 6, float(face.landmarks[0, 1] - face.box[1])) for face in f)] for f in faces]
        cases.append((moved, [[] for _ in faces]))
    debugger = FaceDebuggerProcessor(detector)
    for drawn, marks in cases:
        expected = np.stack([
            draw_faces(frame, list(f), marks[index]) if f else frame
            for index, (frame, f) in enumerate(zip(bgr, drawn, strict=True))
        ])  # fmt: skip
        batch = backend.frames(planes=backend.upload(planes.copy()), bgr=backend.upload(bgr.copy()))
        debugger.draw(backend, batch, Located([list(f) for f in drawn], marks))
        assert batch.bgr is not None and batch.planes is not None
        view = backend.download(batch.bgr)
        assert np.array_equal(view, expected)  # the same pixels in the same colours: boxes, points, scores
        assert np.all(view == np.array(BOX_COLOUR, np.uint8), axis=-1).sum() > 300 * frames
        out = backend.download(batch.planes)
        height = bgr.shape[1]
        for index in range(frames):
            whole = cv2.cvtColor(expected[index], cv2.COLOR_BGR2YUV_I420)
            assert psnr(out[index], whole) >= 40, f"frame {index}"
            marked = np.any(expected[index] != bgr[index], axis=-1)
            assert np.array_equal(out[index, :height][marked], whole[:height][marked]), f"frame {index}"
            regions = np.zeros(marked.shape, bool)  # the planes change only in the regions drawn (2x2 blocks)
            for frame, (x1, y1, x2, y2) in batch.written:
                if frame == index:
                    regions[y1 & ~1 : (y2 + 1) & ~1, x1 & ~1 : (x2 + 1) & ~1] = True
            assert regions[marked].all()
            assert np.array_equal(out[index, :height][~regions], planes[index, :height][~regions]), f"frame {index}"
