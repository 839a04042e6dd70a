"""The frame colouriser end to end: ``swapfarm run`` and the farm's Celery workers colour d18 (480²) through the
DDColor replica, with the same frames in the same order, their lightness kept, their colour the model's, and the
audio."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished, with_face_models
from tests.support.colorizer_replicas import ddcolor
from tests.support.farm import Farm
from tests.support.media import psnr, read_frames, stream_info
from tests.support.replicas import install_replica
from workers.local import run_local

pytestmark = pytest.mark.integration

FRAMES = 12  # frames 0–11 of d18, in two chunks for swapfarm run: cheap, and the stitch joins coloured chunks
TINT = (12.0, -10.0)  # the replica's a, b everywhere
COLOUR = {
    "processors": ["frame_colorizer"],
    "frame_colorizer": {"model": "ddcolor", "size": 192, "blend": 100},
    "trim_end_frame": FRAMES,
    "chunk_frames": 6,
    "encoder": {"quality": 95, "preset": "ultrafast"},
}


@pytest.fixture
def colour_settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    """The DDColor replica, offline, on ONNX Runtime (compiling is the engine tests' business)."""
    offline = with_face_models(settings, data_dir, tmp_path)
    install_replica(ddcolor(tint=TINT), "ddcolor", tmp_path / "models")
    return offline.model_copy(update={"family": "cpu", "lease_seconds": 30, "engine": "onnxruntime"})


def _lab(frames: np.ndarray) -> np.ndarray:
    return np.stack([cv2.cvtColor(frame, cv2.COLOR_RGB2LAB) for frame in frames]).astype(float)


def _coloured_in_order_with_audio(output: Path, clip: Path) -> None:
    out, source = read_frames(output), read_frames(clip, FRAMES)
    assert out.shape == source.shape == (FRAMES, 480, 480, 3)
    assert "audio" in stream_info(output)
    lightness, before = _lab(out), _lab(source)
    for i in range(FRAMES):  # frame i is input frame i, its lightness kept, and no other frame's
        matches = [psnr(lightness[i, ..., 0], before[j, ..., 0]) for j in range(FRAMES)]
        assert int(np.argmax(matches)) == i and matches[i] >= 45, (i, matches)  # measured 49.4-49.9 dB
    # its colour is the model's, not the input's (a, b offset by 128 in 8-bit Lab)
    assert np.median(lightness[..., 1]) == pytest.approx(128 + TINT[0], abs=3)
    assert np.median(lightness[..., 2]) == pytest.approx(128 + TINT[1], abs=3)
    assert psnr(out, source) < 35


def test_swapfarm_run_colours_d18_with_the_same_frames_in_order_and_audio(
    colour_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    clip = data_dir / "media" / "d18.mp4"
    result = run_local(
        target=clip,
        sources=[],
        output=tmp_path / "out.mp4",
        options=JobOptions.model_validate(COLOUR),
        workers=2,
        settings=colour_settings,
    )
    assert result.status == "succeeded", result
    _coloured_in_order_with_audio(tmp_path / "out.mp4", clip)


def test_the_farms_celery_workers_colour_d18(
    colour_settings: Settings, api: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "farm-logs"
    logs.mkdir()
    farm = Farm(colour_settings, logs)
    try:
        farm.worker("w1")
        clip = data_dir / "media" / "d18.mp4"
        job_id = submit(api, clip, COLOUR)
        body = wait_finished(api, job_id, farm)
    finally:
        farm.stop()
    assert body["status"] == "succeeded", body
    _coloured_in_order_with_audio(download(api, job_id, tmp_path / "out.mp4"), clip)
