"""Face-swap jobs on the torch engine in int8, end to end with ``swapfarm run`` (real YuNet, replica ArcFace, small
swapper replicas): every frame out, in order, the faces within 35 dB of the fp32 run's; and a swapper that fails
the int8 guard rendering in bf16 with a ``precision_fallback`` warning on the job, a log line and the metric.

The clip has 40 frames of d18 (one face each): the engine calibrates on the first 32 faces, then runs int8.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

import onnx
import pytest

from shared import events
from shared.db import session_scope
from shared.options import JobOptions
from shared.settings import Settings
from tests.support.media import psnr, read_frames
from tests.support.quant_replicas import int8_inswapper
from tests.support.replicas import arcface_w600k_r50, install_replica, replica_settings
from workers import degradations
from workers.engines.loading import loaded_models
from workers.engines.torch_engine import TorchEngine
from workers.local import run_local

pytestmark = pytest.mark.integration
SWAP = {"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}, "encoder": {"lossless": True}}
FRAMES = 40


def _folder(root: Path, data_dir: Path, swapper: onnx.ModelProto) -> Path:
    models = root / "models"
    models.mkdir(parents=True)
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
    install_replica(swapper, "inswapper_128", models)
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(data_dir / "media" / "d18.mp4"), "-frames:v", str(FRAMES),
         "-c:v", "libx264", "-crf", "12", "-an", str(root / "clip.mp4")],
        check=True,
    )  # fmt: skip
    return models


def _run(root: Path, data_dir: Path, name: str, settings: Settings) -> tuple[Path, str, Path]:
    output, state = root / f"{name}.mp4", root / f"state-{name}"
    result = run_local(
        target=root / "clip.mp4", sources=[data_dir / "media" / "s0.jpg"], output=output,
        options=JobOptions.model_validate(SWAP), workers=1, settings=settings, state_dir=state,
    )  # fmt: skip
    assert result.status == "succeeded", result
    return output, result.job_id, state


def _settings(models: Path, root: Path, **overrides: object) -> Settings:
    return replica_settings(
        models, work_dir=root / "work", torch_compile_cache_dir=root / "compile-cache", torch_compile_mode="eager",
        batch_size=8, **overrides,
    )  # fmt: skip


def _int8_swapper() -> TorchEngine:
    engines = [m.engine for m in loaded_models() if m.name == "inswapper_128" and isinstance(m.engine, TorchEngine)]
    assert engines, "the swapper is not on the torch engine"
    return engines[-1]


def test_an_int8_job_keeps_every_frame_in_order_and_its_faces_within_35_db_of_fp32(
    data_dir: Path, tmp_path: Path
) -> None:
    models = _folder(tmp_path, data_dir, int8_inswapper(outlier=False))
    fp32, _, _ = _run(tmp_path, data_dir, "fp32", _settings(models, tmp_path, engine="onnxruntime"))
    int8, _, _ = _run(tmp_path, data_dir, "int8", _settings(models, tmp_path, engine="torch", torch_precision="int8"))
    engine = _int8_swapper()
    assert engine.precision == "int8" and engine.stats.int8 in {"calibrated", "cache"}, engine.stats
    original, want, got = read_frames(tmp_path / "clip.mp4"), read_frames(fp32), read_frames(int8)
    assert len(got) == len(want) == len(original) == FRAMES
    # the face changed where fp32 changes it, in the same frames (order kept), and int8 stays within 35 dB
    changed = [psnr(want[i], original[i]) < 45 for i in range(FRAMES)]
    assert sum(changed) >= FRAMES // 2
    assert [psnr(got[i], original[i]) < 45 for i in range(FRAMES)] == changed
    values = [psnr(got[i], want[i]) for i in range(FRAMES)]
    assert min(values) >= 35.0, values


def test_a_swapper_that_fails_the_int8_guard_renders_in_bf16_with_a_precision_fallback_warning(
    data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    models = _folder(tmp_path, data_dir, int8_inswapper(outlier=True))
    before = degradations._counts["precision_fallback"]
    with caplog.at_level(logging.WARNING):
        output, job_id, state = _run(
            tmp_path, data_dir, "int8", _settings(models, tmp_path, engine="torch", torch_precision="int8")
        )
    assert len(read_frames(output)) == FRAMES
    assert _int8_swapper().precision == "bf16"
    with session_scope(f"sqlite:///{state / 'swapfarm.db'}") as session:
        warned = [e for e in events.after(session, job_id, limit=500) if e.kind == events.EventKind.WARNING]
        notes = [e.message for e in warned if e.error_code == "precision_fallback"]
    assert len(notes) == 1, notes
    assert "inswapper_128" in notes[0] and "bf16" in notes[0] and "dB" in notes[0]
    assert any("degraded (precision_fallback)" in r.getMessage() for r in caplog.records)
    assert degradations._counts["precision_fallback"] > before  # swapfarm_degradations_total{code="precision_fallback"}
