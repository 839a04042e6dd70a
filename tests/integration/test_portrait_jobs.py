"""The LivePortrait processors end to end: ``expression_restorer`` and ``face_editor`` jobs through the farm's Celery
workers (one worker for the module) and through ``swapfarm run``, on d18's first six frames, in two chunks: the
same frames in the same order, the audio kept, each face redrawn and nothing outside its crop changed by more than
the lossless encoder's rounding (≥ 45 dB). d18's face is large for its 480² frame and face_editor cuts its crop 1.5
times wider, past the frame's edges, so the clip is d18 framed by 160 px of grey noise that changes every frame:
what lies outside the crops then shows which input frame each output frame is. With the frames as planes (the
torch engine's, on the CPU's host back-end) a restorer after ``face_blur`` reads the frames as decoded as with whole
BGR frames."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm
from tests.support.media import psnr, read_frames, stream_info
from tests.support.portrait_replicas import portrait_models
from workers.faces.alignment import estimate_transform
from workers.faces.detection import Face, FaceDetector
from workers.local import run_local
from workers.processors.face_editor import widened

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

FRAMES = 6
LOSSLESS = {"lossless": True, "preset": "ultrafast"}
JOBS: dict[str, dict[str, Any]] = {
    "expression_restorer": {"processors": ["expression_restorer"], "expression_restorer": {"factor": 100}},
    "face_editor": {
        "processors": ["face_editor"],
        "face_editor": {"mouth_smile": 0.5, "eye_open_ratio": -0.5, "head_yaw": 0.1},
    },
}
CROPS = {"expression_restorer": "arcface_128", "face_editor": "ffhq_512"}


@pytest.fixture(scope="module")
def clip(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """d18's first six frames and their audio, framed by 160 px of grey noise that changes every frame."""
    path = tmp_path_factory.mktemp("portrait-clip") / "d18-framed.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(data_dir / "media" / "d18.mp4"), "-frames:v", str(FRAMES),
         "-t", f"{FRAMES / 30:.3f}", "-vf", "pad=800:800:160:160:color=gray,noise=alls=24:allf=t",
         "-c:v", "libx264", "-qp", "0", "-preset", "ultrafast", "-c:a", "aac", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return portrait_models(tmp_path_factory.mktemp("portrait") / "models")


@pytest.fixture
def settings(settings: Settings, models: Path) -> Settings:
    """The module's settings (one farm for all its tests) with the replicas, offline, on ONNX Runtime."""
    return settings.model_copy(
        update={
            "models_dir": models, "model_cache_dir": models.parent / "model-cache", "allow_model_hash_mismatch": True,
            "model_base_urls": [], "family": "cpu", "lease_seconds": 30, "engine": "onnxruntime",
            "min_chunk_frames": 1,  # two chunks of three frames: the stitch joins them
        }
    )  # fmt: skip


def _crop_area(face: Face, processor: str, shape: tuple[int, ...]) -> np.ndarray:
    """Where the processor's 512² crop of ``face`` lies in the frame, grown by 12 px (the tracks' smoothing of the
    landmarks, the encoder's chroma)."""
    landmarks = widened(face).landmarks if processor == "face_editor" else face.landmarks
    back = cv2.invertAffineTransform(estimate_transform(landmarks, CROPS[processor], 512))
    area = cv2.warpAffine(np.full((512, 512), 255, np.uint8), back, (shape[1], shape[0]))
    return cv2.dilate(area, np.ones((25, 25), np.uint8)) > 0


def _check(output: Path, clip: Path, processor: str, settings: Settings) -> None:
    out, source = read_frames(output), read_frames(clip)
    assert out.shape == source.shape == (FRAMES, 800, 800, 3)
    assert "audio" in stream_info(output)
    detector = FaceDetector.load(JobOptions().face, settings)
    for i in range(FRAMES):
        (face,) = detector.detect_frame(np.ascontiguousarray(source[i, :, :, ::-1]))
        crop = _crop_area(face, processor, source[i].shape)
        assert crop.mean() < 0.75
        rest = [psnr(out[i][~crop], source[j][~crop]) for j in range(FRAMES)]
        assert int(np.argmax(rest)) == i and rest[i] >= 45, (i, rest)  # frame i is input frame i, only its face moved
        x1, y1, x2, y2 = face.box.astype(int)
        assert psnr(out[i, y1:y2, x1:x2], source[i, y1:y2, x1:x2]) < 30, i  # the face redrawn


@pytest.mark.parametrize("processor", JOBS)
def test_a_livePortrait_job_through_the_farm(
    processor: str, farm: Farm, api: TestClient, settings: Settings, clip: Path, tmp_path: Path
) -> None:
    farm.worker("w1")
    job_id = submit(api, clip, {**JOBS[processor], "chunk_frames": 3, "encoder": LOSSLESS})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    _check(download(api, job_id, tmp_path / "out.mp4"), clip, processor, settings)


@pytest.mark.parametrize("processor", JOBS)
def test_a_livePortrait_job_with_swapfarm_run(processor: str, settings: Settings, clip: Path, tmp_path: Path) -> None:
    options = JobOptions.model_validate({**JOBS[processor], "chunk_frames": 3, "encoder": LOSSLESS})
    result = run_local(
        target=clip, sources=[], output=tmp_path / "out.mp4", options=options, workers=2, settings=settings
    )
    assert result.status == "succeeded", result
    _check(tmp_path / "out.mp4", clip, processor, settings)


def test_on_the_device_path_the_restorer_after_face_blur_reads_the_frames_as_decoded(
    settings: Settings, clip: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """face_blur blurs the frames in place as planes on the host back-end (its BGR view is the host's frames); the
    restorer still reads the decoded faces' expressions there, and both paths give the same frames."""
    options = JobOptions.model_validate(
        {"processors": ["face_blur", "expression_restorer"], "face": {"blur_strict": False}, "encoder": LOSSLESS}
    )
    outputs = {}
    for engine in ("onnxruntime", "torch"):
        on = settings.model_copy(update={"engine": engine, "model_engines": {"yunet": "onnxruntime", **{
            f"live_portrait_{part}": "onnxruntime" for part in ("feature_extractor", "motion_extractor", "generator")
        }}})  # fmt: skip
        outputs[engine] = tmp_path / f"{engine}.mp4"
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="workers.rendering"):
            result = run_local(target=clip, sources=[], output=outputs[engine], options=options, workers=1, settings=on)
        assert result.status == "succeeded", result
        took = any("frames as planes on the host back-end on cpu" in record.getMessage() for record in caplog.records)
        assert took == (engine == "torch"), engine
    host, device = read_frames(outputs["onnxruntime"]), read_frames(outputs["torch"])
    for index in range(FRAMES):
        assert psnr(device[index], host[index]) >= 40, index
