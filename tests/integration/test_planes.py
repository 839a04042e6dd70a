"""The frames as planes end to end (``swapfarm run``): with the engine set to torch, a job's frames travel as the
decoder's 4:2:0 planes through the worker's frame back-end (the host back-end on the CPU here, as in CI) and come
out as whole BGR frames do — ≥ 40 dB PSNR per frame on ``d18`` and ``crowd_1080p``, for ``face_blur`` (default,
strict options), ``face_swapper`` (replica inswapper, on ONNX Runtime in both runs, so that only the frame path
differs; on ``d18`` also chained with ``face_enhancer``), ``face_debugger`` (on ``d18`` with the 68 points of a
2dfan4 replica) and, on ``d18``, ``face_blur`` pixelating chained with ``face_debugger``, with the faces detected
by the detector converted to torch (an ordinary torch engine, its decode and NMS in torch).
A job of several chunks through the farm's Celery workers (look-behind and look-ahead frames as planes too) agrees
the same way; so do a chain ending in the frame enhancer (``face_swapper`` then ``real_esrgan_x2``), its frames
twice as large; and a chain whose frames cannot travel as planes (odd frame sizes) renders as whole BGR frames with
a job warning.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared import events
from shared.db import session_scope
from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support import mask_replicas
from tests.support.farm import Farm
from tests.support.media import make_clip, psnr, read_frames
from tests.support.replicas import arcface_w600k_r50, gfpgan_1_4, install_replica, inswapper_128, replica_settings
from tests.support.upscaler_replicas import real_esrgan
from workers.faces.device_detection import DETECTION_FALLBACK
from workers.frames.choice import FALLBACK
from workers.local import run_local

pytestmark = pytest.mark.integration

PARITY_DB = 40.0
CLIPS = {"d18.mp4": 6, "crowd_1080p.mp4": 3}  # frames rendered of each: a few, through the whole job path
JOBS: dict[str, dict[str, Any]] = {
    "face_blur": {"processors": ["face_blur"]},
    "face_swapper": {"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}},
    "face_swapper+face_enhancer": {  # a chain: the enhancer crops the swapped frames, pastes a larger crop back
        "processors": ["face_swapper", "face_enhancer"],
        "face": {"swapper": "inswapper_128", "enhancer": "gfpgan_1.4"},
    },
    "face_blur pixelate+face_debugger": {  # a chain: the marks drawn over the pixelated faces
        "processors": ["face_blur", "face_debugger"],
        "face": {"blur_style": "pixelate"},
    },
    "face_debugger": {"processors": ["face_debugger"]},
    "face_debugger 68": {"processors": ["face_debugger"], "face": {"landmarker_score": 0.5}},  # 2dfan4's points
}
CASES = [(clip, job) for clip in CLIPS for job in ("face_blur", "face_swapper")] + [
    ("d18.mp4", "face_swapper+face_enhancer"),
    ("d18.mp4", "face_blur pixelate+face_debugger"),
    ("d18.mp4", "face_debugger 68"),
    ("crowd_1080p.mp4", "face_debugger"),
]

# replicas on ONNX Runtime in both runs: only the frame path differs
_REPLICAS = ("inswapper_128", "gfpgan_1.4", "real_esrgan_x2", "fan_68_5", "2dfan4")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("device-path") / "models"
    folder.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", folder)
    install_replica(inswapper_128(), "inswapper_128", folder)
    install_replica(gfpgan_1_4(), "gfpgan_1.4", folder)
    install_replica(real_esrgan(2), "real_esrgan_x2", folder)
    install_replica(mask_replicas.fan_68_5(), "fan_68_5", folder)
    install_replica(mask_replicas.fan_2dfan4(), "2dfan4", folder)
    return folder


def _settings(models: Path, tmp_path: Path, engine: str) -> Settings:
    # the models stay on ONNX Runtime either way: the engine setting picks the frame path
    return replica_settings(
        models,
        work_dir=tmp_path / "work",
        engine=engine,
        model_engines=dict.fromkeys(_REPLICAS, "onnxruntime"),
        device_detection="on",  # what a GPU worker does by default; on the CPU it is off unless asked for
    )


def _render(clip: Path, job: dict[str, Any], frames: int, settings: Settings, output: Path, state: Path) -> str:
    options = {**job, "trim_end_frame": frames, "encoder": {"lossless": True}}
    result = run_local(
        target=clip,
        sources=[clip.parent / "s0.jpg"],
        output=output,
        options=JobOptions.model_validate(options),
        workers=1,
        settings=settings,
        state_dir=state,
    )
    assert result.status == "succeeded", result
    return result.job_id


def _warnings(state: Path, job_id: str) -> dict[str | None, str]:
    with session_scope(f"sqlite:///{state / 'swapfarm.db'}") as session:
        found = events.after(session, job_id, limit=500)
        return {e.error_code: e.message for e in found if e.kind == events.EventKind.WARNING}


def _chunks_done(state: Path, job_id: str) -> list[str]:
    with session_scope(f"sqlite:///{state / 'swapfarm.db'}") as session:
        found = events.after(session, job_id, limit=500)
        return [e.message or "" for e in found if e.kind == events.EventKind.CHUNK_DONE]


@pytest.mark.parametrize(("clip", "processor"), CASES)
def test_the_device_path_renders_what_the_opencv_path_renders(
    clip: str, processor: str, models: Path, data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, frames = data_dir / "media" / clip, CLIPS[clip]
    outputs, states = {}, {}
    for engine in ("onnxruntime", "torch"):
        outputs[engine], states[engine] = tmp_path / f"{engine}.mp4", tmp_path / f"state-{engine}"
        caplog.clear()
        with (
            caplog.at_level(logging.INFO, logger="workers.rendering"),
            caplog.at_level(logging.INFO, logger="workers.faces.device_detection"),
            caplog.at_level(logging.INFO, logger="workers.frames.feed"),
        ):
            job_id = _render(source, JOBS[processor], frames, _settings(models, tmp_path, engine), outputs[engine],
                             states[engine])  # fmt: skip
        warned = _warnings(states[engine], job_id)
        assert FALLBACK not in warned
        done = _chunks_done(states[engine], job_id)  # the frame back-end, in the job's events
        assert done and all("frames on the host back-end on cpu" in m for m in done), (engine, done)
        took = any("frames as planes on the host back-end on cpu" in r.getMessage() for r in caplog.records)
        assert took == (engine == "torch"), engine
        # the faces were found on the device too: the converted detector, its decode and NMS in torch
        detected = any("faces detected on the cpu device (yunet" in r.getMessage() for r in caplog.records)
        assert detected == (engine == "torch"), engine
        # on the CPU the planes are on the host back-end: the feed converts there and copies nothing up or down
        fed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("frame feed on the host back-end")]
        assert len(fed) == (engine == "torch") and all("converted, 0 uploaded, 0 downloaded" in m for m in fed)
        if DETECTION_FALLBACK in warned:  # only the strict sweep's enlarged pass of a small frame stays on the host
            assert "enlarged pass" in warned[DETECTION_FALLBACK] and "tiles" not in warned[DETECTION_FALLBACK]
    host, device = read_frames(outputs["onnxruntime"]), read_frames(outputs["torch"])
    original = read_frames(source, frames)
    assert host.shape == device.shape == original.shape
    for index in range(frames):
        assert psnr(device[index], host[index]) >= PARITY_DB, f"frame {index}"
        # the faces were changed, and changed alike: where whole BGR frames moved pixels, the planes did too
        changed = np.abs(host[index].astype(int) - original[index].astype(int)).max(axis=2) > 24
        assert changed.sum() > 500, f"frame {index}: no face was changed"
        moved = np.abs(device[index].astype(int) - original[index].astype(int)).max(axis=2) > 12
        assert moved[changed].mean() > 0.95, f"frame {index}: the planes left faces the BGR frames changed"


def test_a_chain_ending_in_the_frame_enhancer_renders_on_the_device_path_as_on_the_opencv_path(
    models: Path, data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = {
        "processors": ["face_swapper", "frame_enhancer"],
        "face": {"swapper": "inswapper_128"},
        "frame_enhancer": {"model": "real_esrgan_x2", "blend": 80},
    }
    clip, frames = data_dir / "media" / "d18.mp4", 3
    outputs = {engine: tmp_path / f"{engine}.mp4" for engine in ("onnxruntime", "torch")}
    for engine, output in outputs.items():
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="workers.rendering"):
            job_id = _render(clip, job, frames, _settings(models, tmp_path, engine), output, tmp_path / engine)
        assert FALLBACK not in _warnings(tmp_path / engine, job_id)
        took = any("frames as planes on the host back-end on cpu" in r.getMessage() for r in caplog.records)
        assert took == (engine == "torch"), engine
    host, device = read_frames(outputs["onnxruntime"]), read_frames(outputs["torch"])
    assert host.shape == device.shape == (frames, 960, 960, 3)  # d18's 480² frames, twice as large
    for index in range(frames):
        assert psnr(device[index], host[index]) >= PARITY_DB, f"frame {index}"


def test_a_chain_the_device_path_cannot_run_renders_on_the_opencv_path_with_a_warning(
    models: Path, data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 4:2:0 planes cannot hold odd sizes: such a file (4:4:4) renders as whole BGR frames, and the job says so
    clip = make_clip(tmp_path / "odd.mp4", seconds=1, size="321x181", extra=["-pix_fmt", "yuv444p"])
    shutil.copy(data_dir / "media" / "s0.jpg", tmp_path / "s0.jpg")  # the source _render hands every job
    state = tmp_path / "state"
    with caplog.at_level(logging.WARNING):
        job_id = _render(clip, {"processors": ["face_blur"]}, 4, _settings(models, tmp_path, "torch"),
                         tmp_path / "out.mp4", state)  # fmt: skip
    warned = _warnings(state, job_id)
    assert FALLBACK in warned and "odd size" in warned[FALLBACK] and "whole BGR frames" in warned[FALLBACK]
    assert any(f"degraded ({FALLBACK})" in r.getMessage() for r in caplog.records)


def test_a_job_of_several_chunks_through_the_farm_takes_the_device_path(
    models: Path, settings: Settings, api: TestClient, data_dir: Path, tmp_path: Path
) -> None:
    clip, frames = data_dir / "media" / "d18.mp4", 16
    # plain face_blur (no strict detection sweep: cheaper), tracked across the chunks' edges
    job = {
        "processors": ["face_blur"],
        "face": {"blur_strict": False},
        "chunk_frames": 8,
        "trim_end_frame": frames,
        "encoder": {"lossless": True},
    }
    reference = tmp_path / "opencv.mp4"
    _render(clip, job, frames, _settings(models, tmp_path, "onnxruntime"), reference, tmp_path / "state")
    device = _settings(models, tmp_path, "torch")
    farm_settings = settings.model_copy(
        update={k: getattr(device, k) for k in ("models_dir", "model_cache_dir", "allow_model_hash_mismatch",
                                                "family", "model_base_urls", "engine", "model_engines",
                                                "device_detection")}
    )  # fmt: skip
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(farm_settings, logs)
    try:
        farm.worker("w1")
        job_id = submit(api, clip, job)
        body = wait_finished(api, job_id, farm)
    finally:
        farm.stop()
    assert body["status"] == "succeeded", body
    assert (logs / "w1.log").read_text(errors="replace").count(
        "frames as planes on the host back-end on cpu"
    ) == 2  # per chunk
    ours, theirs = read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(reference)
    assert ours.shape == theirs.shape and len(ours) == frames
    for index in range(frames):
        assert psnr(ours[index], theirs[index]) >= PARITY_DB, f"frame {index}"
