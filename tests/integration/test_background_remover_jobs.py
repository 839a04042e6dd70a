"""The background remover end to end: ``swapfarm run`` and the farm's Celery workers take d18's first 12 frames (in
two chunks) through the modnet replica, filled with green, and with transparency into ProRes 4444: the same frames
in the same order, the person as it was (within 45 dB), the background the fill's, the audio kept; the transparent
output's pixel format has alpha, and the background's alpha is 0 after the stitch. A worker whose operator disabled
the model's licence refuses the job that an API allowed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import submit, wait_finished
from tests.support.background_replicas import ellipse, matting
from tests.support.farm import Farm
from tests.support.media import make_clip, psnr, read_frames, stream_info
from tests.support.replicas import install_replica
from workers.local import run_local

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

FRAMES = 12  # frames 0–11 of d18 in chunks of 8 and 4 (the farm's least chunk is 8): the stitch joins two
SIDE = 480
BASE: dict[str, Any] = {"processors": ["background_remover"], "trim_end_frame": FRAMES, "chunk_frames": 6}
FILL: dict[str, Any] = {
    **BASE, "background_remover": {"fill_colour": [0, 255, 0]}, "encoder": {"lossless": True, "preset": "ultrafast"},
}  # fmt: skip
ALPHA: dict[str, Any] = {
    **BASE, "background_remover": {"transparent": True}, "encoder": {"encoder": "prores_ks", "quality": 90},
}  # fmt: skip
INNER = ellipse(SIDE, radii=(0.34, 0.48))  # well inside the replica's matte: the person
OUTER = ~ellipse(SIDE, radii=(0.42, 0.56))  # well outside it: the background


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The modnet replica, offline, in the module's folder (one farm for every test), on ONNX Runtime."""
    folder = settings.work_dir.parent
    if not (folder / "models" / "modnet.onnx").exists():
        install_replica(matting("modnet"), "modnet", folder / "models")
    return settings.model_copy(
        update={
            "models_dir": folder / "models", "model_cache_dir": folder / "model-cache", "model_base_urls": [],
            "allow_model_hash_mismatch": True, "family": "cpu", "engine": "onnxruntime", "lease_seconds": 30,
        }
    )  # fmt: skip


def _alpha(path: Path) -> np.ndarray:
    """Every frame's alpha as ffmpeg decodes the file (each frame as it comes)."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "rgba",
         "-"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(-1, SIDE, SIDE, 4)[..., 3]


def _pixel_format(path: Path) -> str:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=pix_fmt", "-of", "json",
         str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return str(json.loads(out)["streams"][0]["pix_fmt"])


def _luma(path: Path) -> np.ndarray:
    """Every frame's luma as ffmpeg decodes the file: ProRes's 4:4:4 chroma and the source's 4:2:0 are
    resampled differently on the way to RGB (about 45 dB apart before any processing), their luma is not."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-fps_mode", "passthrough", "-f", "rawvideo", "-pix_fmt", "gray",
         "-"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.uint8).reshape(-1, SIDE, SIDE)


def _person_kept_in_order(output: Path, clip: Path) -> np.ndarray:
    out = read_frames(output)
    luma, source = _luma(output), _luma(clip)[:FRAMES]
    assert out.shape == (FRAMES, SIDE, SIDE, 3) and luma.shape == source.shape
    assert "audio" in stream_info(output)
    for i in range(FRAMES):  # frame i is input frame i where the person is, and no other frame
        matches = [psnr(luma[i][INNER], source[j][INNER]) for j in range(FRAMES)]
        assert int(np.argmax(matches)) == i and matches[i] >= 45, (i, matches)
    return out


def _filled(output: Path, clip: Path) -> None:
    out = _person_kept_in_order(output, clip)
    assert np.abs(out[:, OUTER].astype(int) - (0, 255, 0)).max() <= 2  # RGB green behind (4:2:0 rounds it)


def _transparent(output: Path, clip: Path) -> None:
    assert _pixel_format(output).startswith("yuva"), _pixel_format(output)
    out = _person_kept_in_order(output, clip)
    alpha = _alpha(output)
    assert len(alpha) == FRAMES
    assert (alpha[:, OUTER] == 0).all() and (alpha[:, INNER] == 255).all()
    assert (out[:, OUTER] <= 8).all()  # the default fill, black, under the transparency


def test_swapfarm_run_fills_d18s_background_and_keeps_its_person_frames_and_audio(
    settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    clip = data_dir / "media" / "d18.mp4"
    options = JobOptions.model_validate(FILL)
    result = run_local(
        target=clip, sources=[], output=tmp_path / "out.mp4", options=options, workers=2, settings=settings
    )  # fmt: skip
    assert result.status == "succeeded", result
    _filled(tmp_path / "out.mp4", clip)


def test_swapfarm_run_keeps_the_transparency_through_the_stitch(
    settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    clip = data_dir / "media" / "d18.mp4"
    options = JobOptions.model_validate(ALPHA)
    result = run_local(
        target=clip, sources=[], output=tmp_path / "out.mov", options=options, workers=2, settings=settings
    )  # fmt: skip
    assert result.status == "succeeded", result
    _transparent(tmp_path / "out.mov", clip)


def test_the_farms_celery_workers_fill_and_keep_transparency(
    settings: Settings, api: TestClient, farm: Farm, data_dir: Path, tmp_path: Path
) -> None:
    farm.worker("w1")
    clip = data_dir / "media" / "d18.mp4"
    filled, transparent = submit(api, clip, FILL), submit(api, clip, ALPHA)
    for job_id, media_type, check in ((filled, "video/mp4", _filled), (transparent, "video/quicktime", _transparent)):
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        response = api.get(f"/v1/jobs/{job_id}/output")
        assert response.status_code == 200 and response.headers["content-type"] == media_type
        extension = ".mov" if media_type == "video/quicktime" else ".mp4"
        assert response.headers["content-disposition"].endswith(f'-swapped{extension}"')
        output = tmp_path / f"{job_id}{extension}"
        output.write_bytes(response.content)
        check(output, clip)


def test_a_worker_refuses_the_model_of_a_licence_its_operator_disabled(
    settings: Settings, api: TestClient, farm: Farm, tmp_path: Path
) -> None:
    """The API allowed the job (its settings disable nothing); the worker's setting refuses it as it loads the
    model, and the job fails with the same code, at once (no retry can change a licence)."""
    farm.worker("w2", env={"SWAPFARM_DISABLED_LICENCES": '["apache-2.0"]'})
    clip = make_clip(tmp_path / "clip.mp4", seconds=0.5, size="64x64")
    job_id = submit(api, clip, {"processors": ["background_remover"]})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "failed", body
    assert body["error"]["code"] == "model_licence_disabled" and "modnet (apache-2.0)" in body["error"]["message"]
