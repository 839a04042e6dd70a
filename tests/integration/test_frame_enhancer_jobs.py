"""The frame enhancer end to end: ``swapfarm run`` and the farm's Celery workers upscale d18 (480²) to 960², with
the same frames and the audio, the encoder and the stitcher following the processors' output size."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished, with_face_models
from tests.support.farm import Farm
from tests.support.media import psnr, read_frames, stream_info
from tests.support.replicas import install_replica
from tests.support.upscaler_replicas import real_esrgan
from workers.faces.detection import FaceDetector
from workers.local import run_local
from workers.processors.face_blur import face_region

pytestmark = pytest.mark.integration

FRAMES = 24  # frames 0–23 of d18, in two chunks: cheap, and the stitch joins upscaled chunks
UPSCALE = {
    "processors": ["frame_enhancer"],
    "frame_enhancer": {"model": "real_esrgan_x2", "blend": 100},
    "trim_end_frame": FRAMES,
    "chunk_frames": 12,
    "encoder": {"quality": 95, "preset": "ultrafast"},
}


@pytest.fixture
def upscale_settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    """YuNet and the bilinear ×2 replica, offline."""
    face = with_face_models(settings, data_dir, tmp_path)
    install_replica(real_esrgan(2), "real_esrgan_x2", tmp_path / "models")  # where with_face_models put YuNet
    # ONNX Runtime, as every replica test: compiling is the engine tests' business (tests/support/replicas.py)
    return face.model_copy(update={"family": "cpu", "lease_seconds": 30, "engine": "onnxruntime"})


def _upscaled_input(clip: Path) -> np.ndarray:
    source = read_frames(clip, FRAMES)
    return np.stack([cv2.resize(frame, (960, 960), interpolation=cv2.INTER_LINEAR) for frame in source])


def _same_frames_twice_as_large_with_audio(output: Path, clip: Path) -> tuple[np.ndarray, np.ndarray]:
    out, expected = read_frames(output), _upscaled_input(clip)
    assert out.shape == (FRAMES, 960, 960, 3)
    assert "audio" in stream_info(output)
    return out, expected


def test_swapfarm_run_upscales_d18_to_960_with_the_same_frames_and_audio(
    upscale_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    clip = data_dir / "media" / "d18.mp4"
    result = run_local(
        target=clip,
        sources=[],
        output=tmp_path / "out.mp4",
        options=JobOptions.model_validate(UPSCALE),
        workers=2,
        settings=upscale_settings,
    )
    assert result.status == "succeeded", result
    out, expected = _same_frames_twice_as_large_with_audio(tmp_path / "out.mp4", clip)
    for i in range(FRAMES):  # the bilinear replica: each frame is its input frame, twice as large
        assert psnr(out[i], expected[i]) >= 45, i  # measured 53-54 dB (x264 at quality 95)


def test_the_frame_enhancers_frames_are_the_ones_the_stitcher_re_times_to_output_fps(
    upscale_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    """``output_fps`` with the enhancer: the stitcher's re-encode takes the upscaled size, and each frame it keeps
    is an input frame upscaled, in order."""
    clip = data_dir / "media" / "d18.mp4"  # 30 fps: 24 frames are 0.8 s, 12 frames at 15 fps
    options = JobOptions.model_validate({**UPSCALE, "output_fps": 15})
    result = run_local(
        target=clip, sources=[], output=tmp_path / "out.mp4", options=options, workers=2, settings=upscale_settings
    )
    assert result.status == "succeeded", result
    out, expected = read_frames(tmp_path / "out.mp4"), _upscaled_input(clip)
    assert out.shape == (12, 960, 960, 3)
    assert "audio" in stream_info(tmp_path / "out.mp4")
    sources = [max(range(FRAMES), key=lambda i, frame=frame: psnr(frame, expected[i])) for frame in out]
    assert all(psnr(frame, expected[i]) >= 40 for frame, i in zip(out, sources, strict=True)), sources
    assert sources == sorted(sources) and len(set(sources)) == 12, sources


def test_a_face_job_then_the_frame_enhancer_runs_through_the_farm(
    upscale_settings: Settings, api: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    """face_blur on the frames as decoded, then ×2: the faces are hidden at their place in the larger frame, the
    rest is the input upscaled (boxes found again on the input: the two decodes may differ by a pixel)."""
    logs = tmp_path / "farm-logs"
    logs.mkdir()
    farm = Farm(upscale_settings, logs)
    try:
        farm.worker("w1")
        clip = data_dir / "media" / "d18.mp4"
        # plain blur (the faces detected at detector_score, inside their boxes): cheaper than strict mode's passes
        face = {"blur_strict": False, "tracking": False}
        # one chunk: joining upscaled chunks is the swapfarm run test's; this one is about the Celery workers
        options = {**UPSCALE, "processors": ["face_blur", "frame_enhancer"], "face": face, "chunk_frames": FRAMES}
        job_id = submit(api, clip, options)
        body = wait_finished(api, job_id, farm)
    finally:
        farm.stop()
    assert body["status"] == "succeeded", body
    out, expected = _same_frames_twice_as_large_with_audio(download(api, job_id, tmp_path / "out.mp4"), clip)
    detector = FaceDetector.load(JobOptions().face, upscale_settings)
    source = read_frames(clip)
    for i in (0, 12, 23):
        faces = detector.detect_frame(np.ascontiguousarray(source[i, :, :, ::-1]))
        assert faces, f"no face in input frame {i}"
        x1, y1, x2, y2 = (2 * v for v in face_region(faces[0], source[i].shape))
        face_out, face_in = out[i, y1:y2, x1:x2].astype(float), expected[i, y1:y2, x1:x2].astype(float)
        assert np.abs(np.diff(face_out, axis=1)).mean() < 0.6 * np.abs(np.diff(face_in, axis=1)).mean(), i
        outside = np.ones((960, 960), bool)
        outside[max(y1 - 24, 0) : y2 + 24, max(x1 - 24, 0) : x2 + 24] = False  # the box and a few pixels around
        assert psnr(out[i][outside], expected[i][outside]) >= 45, i  # measured 55.7-56.1 dB
