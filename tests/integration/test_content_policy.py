"""The operator's content policy end to end with ``swapfarm run``: replica analysers that flag every sampled frame
refuse the job with ``content_refused`` and leave no output; ones that flag none let it through; off, nothing
is analysed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from shared.options import JobOptions
from shared.settings import Settings
from tests.support import mask_replicas
from tests.support.media import read_frames
from tests.support.replicas import install_replica
from workers.content import ANALYSERS, ContentAnalyser
from workers.engines.onnx import OnnxEngine
from workers.local import run_local

pytestmark = pytest.mark.integration

PASSTHROUGH = {"processors": ["passthrough"], "chunk_frames": 108}


def _settings(settings: Settings, tmp_path: Path, flags: dict[str, bool], policy: bool = True) -> Settings:
    models = tmp_path / "models"
    for name, flagged in flags.items():
        install_replica(mask_replicas.nsfw(name, flagged), name, models)
    return settings.model_copy(
        update={
            "models_dir": models,
            "model_cache_dir": tmp_path / "model-cache",
            "allow_model_hash_mismatch": True,
            "model_base_urls": [],
            "family": "cpu",
            "content_policy": policy,
        }
    )


def _run(settings: Settings, data_dir: Path, output: Path) -> tuple[str, str | None]:
    result = run_local(
        target=data_dir / "media" / "d18.mp4",
        sources=[],
        output=output,
        options=JobOptions.model_validate(PASSTHROUGH),
        workers=1,
        settings=settings,
    )
    return result.status, result.error_code


def test_a_video_every_analyser_flags_is_refused_and_leaves_no_output(
    settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    flagging = _settings(settings, tmp_path, dict.fromkeys(ANALYSERS, True))
    assert _run(flagging, data_dir, tmp_path / "out.mp4") == ("failed", "content_refused")
    assert not (tmp_path / "out.mp4").exists()
    stored = [path.name for path in (tmp_path / "storage").rglob("*.mp4")]
    assert all(name.startswith("target") or "input" in name for name in stored), f"an output was kept: {stored}"


def test_a_video_no_analyser_flags_passes_the_policy(settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    passing = _settings(settings, tmp_path, dict.fromkeys(ANALYSERS, False))
    assert _run(passing, data_dir, tmp_path / "out.mp4") == ("succeeded", None)
    assert len(read_frames(tmp_path / "out.mp4")) == len(read_frames(data_dir / "media" / "d18.mp4"))


def test_without_the_policy_no_analyser_is_needed(settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    off = _settings(settings, tmp_path, {}, policy=False)  # no analyser installed at all
    assert _run(off, data_dir, tmp_path / "out.mp4") == ("succeeded", None)


@pytest.mark.parametrize(
    ("flags", "flagged"),
    [((True, True, False), True), ((False, True, True), True), ((True, False, False), False), ((False,) * 3, False)],
)
def test_a_frame_is_flagged_when_two_of_the_three_analysers_flag_it(
    tmp_path: Path, flags: tuple[bool, ...], flagged: bool, settings: Settings
) -> None:
    analysers = []
    for (name, spec), flag in zip(ANALYSERS.items(), flags, strict=True):
        path = install_replica(mask_replicas.nsfw(name, flag), name, tmp_path)
        analysers.append((spec, OnnxEngine.load(path, _settings(settings, tmp_path, {}))))
    frames = np.random.default_rng(0).integers(0, 256, (3, 120, 160, 3), dtype=np.uint8)
    analyser = ContentAnalyser(analysers)
    assert analyser.flagged(frames).tolist() == [flagged] * 3
    assert analyser.refuses(frames) == flagged
