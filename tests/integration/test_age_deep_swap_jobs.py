"""The age modifier and the deep swapper end to end: ``swapfarm run`` (each alone) and the farm's Celery workers (the
two in one job) on the first frames of d18 (480², one face), through the fran replica (told a FairFace age by its
replica) and DeepFaceLive replicas — the catalogue's default id, and an operator's ``custom/<stem>`` file.
Every frame comes back, in order, with the audio; the face changes and the rest of each frame stays within 45 dB
(lossless x264: what changed is the processor's). A malformed custom file fails its job with ``model_invalid``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished, with_face_models
from tests.support import mask_replicas
from tests.support.age_replicas import fran
from tests.support.deep_swap_replicas import dfm
from tests.support.farm import Farm
from tests.support.media import psnr, read_frames, stream_info
from tests.support.replicas import install_replica
from workers.faces.alignment import estimate_transform, paste_region
from workers.faces.detection import FaceDetector
from workers.local import run_local

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

FRAMES = 4  # frames 0-3 of d18, in two chunks: the stitch joins processed chunks
COMMON: dict[str, Any] = {
    "trim_end_frame": FRAMES, "chunk_frames": 2, "encoder": {"lossless": True, "preset": "ultrafast"},
}  # fmt: skip
AGE = {**COMMON, "processors": ["age_modifier"], "age_modifier": {"model": "fran", "direction": 40}}
DEEP = {**COMMON, "processors": ["deep_swapper"], "deep_swapper": {"model": "iperov/elon_musk_224", "morph": 100}}
CUSTOM = {**DEEP, "deep_swapper": {"model": "custom/mine", "morph": 100}}
CHAIN = {**AGE, **DEEP, "processors": ["deep_swapper", "age_modifier"]}
# what each job pastes back: the template and side of its crops
CROPS = {
    "age_modifier": ("ffhq_512", 1024),
    "iperov/elon_musk_224": ("dfl_whole_face", 224),
    "custom/mine": ("dfl_whole_face", 128),
}


@pytest.fixture
def settings(settings: Settings, data_dir: Path) -> Settings:
    """The module's settings (one farm for all): YuNet, the FairFace, fran and DeepFaceLive replicas offline, on
    ONNX Runtime (compiling is the engine tests' business)."""
    folder = settings.work_dir.parent
    offline = with_face_models(settings, data_dir, folder)
    models = folder / "models"
    install_replica(mask_replicas.fairface(answer=(0, 1, 3)), "fairface", models)  # 20-29: fran is told 24
    install_replica(fran(), "fran", models)
    install_replica(dfm(), "iperov/elon_musk_224", models)
    (models / "custom").mkdir(exist_ok=True)
    onnx.save(dfm(side=128, morph=False), str(models / "custom" / "mine.dfm"))
    (models / "custom" / "broken.dfm").write_bytes(b"not a model")
    return offline.model_copy(
        update={"family": "cpu", "lease_seconds": 30, "engine": "onnxruntime", "min_chunk_frames": 1}
    )


def _changed_face_only(
    output: Path, clip: Path, crops: list[tuple[str, int]], settings: Settings
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every frame, in order, with the audio; the face changed and the rest of each frame (outside the crops the
    processors paste back) kept. Returns each frame's face core, output and input (RGB)."""
    out, source = read_frames(output), read_frames(clip, FRAMES)  # RGB
    assert out.shape == source.shape == (FRAMES, 480, 480, 3)
    assert "audio" in stream_info(output)
    detector = FaceDetector.load(JobOptions().face, settings)
    cores = []
    for i in range(FRAMES):
        (face,) = detector.detect_frame(np.ascontiguousarray(source[i, :, :, ::-1]))
        rest = np.ones(source[i].shape[:2], bool)
        for template, side in crops:
            x1, y1, x2, y2 = paste_region(source[i].shape, side, estimate_transform(face.landmarks, template, side))
            rest[max(y1 - 8, 0) : y2 + 8, max(x1 - 8, 0) : x2 + 8] = False  # 8 px: the tracks' smoothed landmarks
        kept = [psnr(out[i][rest], source[j][rest]) for j in range(FRAMES)]
        assert int(np.argmax(kept)) == i and kept[i] >= 45, (i, kept)  # frame i is input frame i, the rest kept
        fx1, fy1, fx2, fy2 = face.box.astype(int)
        assert psnr(out[i][fy1:fy2, fx1:fx2], source[i][fy1:fy2, fx1:fx2]) < 30, i  # and its face changed
        qx, qy = (fx2 - fx1) // 4, (fy2 - fy1) // 4
        core = (slice(fy1 + qy, fy2 - qy), slice(fx1 + qx, fx2 - qx))
        cores.append((out[i][core].astype(float), source[i][core].astype(float)))
    return cores


def _through_the_farm(api: TestClient, farm: Farm, clip: Path, options: dict[str, Any], tmp_path: Path) -> Path:
    farm.worker("w1")
    job_id = submit(api, clip, options)
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    return download(api, job_id, tmp_path / "out.mp4")


def _with_swapfarm_run(settings: Settings, clip: Path, options: dict[str, Any], tmp_path: Path) -> Path:
    output = tmp_path / "out.mp4"
    result = run_local(
        target=clip, sources=[], output=output, options=JobOptions.model_validate(options), workers=2,
        settings=settings,
    )  # fmt: skip
    assert result.status == "succeeded", result
    return output


def test_the_farms_celery_workers_deep_swap_then_age_d18(
    settings: Settings, api: TestClient, farm: Farm, data_dir: Path, tmp_path: Path
) -> None:
    """Both processors in one job through the Celery workers: the face becomes the model's person (the deep
    swapper replica's stripes) and is then aged (the fran replica's red, for 40 years)."""
    clip = data_dir / "media" / "d18.mp4"
    output = _through_the_farm(api, farm, clip, CHAIN, tmp_path)
    crops = [CROPS["iperov/elon_musk_224"], CROPS["age_modifier"]]
    for out, source in _changed_face_only(output, clip, crops, settings):
        assert out[..., 0].mean() - source[..., 0].mean() > 40  # aged: redder
        stripes = [np.abs(np.diff(image, axis=1)).mean() for image in (out, source)]
        assert stripes[0] > 2 * stripes[1], stripes  # swapped: the model's person


def test_swapfarm_run_ages_d18(settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    clip = data_dir / "media" / "d18.mp4"
    _changed_face_only(_with_swapfarm_run(settings, clip, AGE, tmp_path), clip, [CROPS["age_modifier"]], settings)


def test_swapfarm_run_deep_swaps_d18_with_the_operators_own_model(
    settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    clip = data_dir / "media" / "d18.mp4"
    _changed_face_only(_with_swapfarm_run(settings, clip, CUSTOM, tmp_path), clip, [CROPS["custom/mine"]], settings)


def test_a_job_with_a_malformed_custom_model_fails_with_model_invalid(
    settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    options = {**CUSTOM, "deep_swapper": {"model": "custom/broken"}}
    result = run_local(
        target=data_dir / "media" / "d18.mp4", sources=[], output=tmp_path / "out.mp4",
        options=JobOptions.model_validate(options), workers=1, settings=settings,
    )  # fmt: skip
    assert result.status == "failed" and result.error_code == "model_invalid", result
    assert "custom/broken" in (result.error_message or "") and "not an ONNX model" in (result.error_message or "")
    assert not (tmp_path / "out.mp4").exists()
