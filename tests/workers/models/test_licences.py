"""Model licences: every model of the registry has one, the operator's ``disabled_licences`` disables what it names
(``non-commercial``: every licence that forbids commercial use), a job that needs such a model is refused naming it,
a worker refuses to load one, and ``swapfarm models list`` shows both. The tables the API decides by (shared/)
agree with the workers' own."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from cli.models import app
from shared.errors import LicenceDisabledError
from shared.job_models import CONTENT_ANALYSERS, DETECTOR_MODELS, RECOGNISER, SWAPPER_CONVERTERS, job_models
from shared.licences import LICENCES, MODEL_LICENCES, check_job, disabled
from shared.options import JobOptions
from shared.settings import Settings, get_settings
from tests.support.background_replicas import matting
from tests.support.media import make_clip
from tests.support.replicas import install_replica, replica_settings
from workers.content import ANALYSERS
from workers.faces.detection import DETECTORS
from workers.faces.recognition import DEFAULT_RECOGNISER
from workers.faces.swapping import SWAPPERS
from workers.models.download import resolve
from workers.models.registry import REGISTRY
from workers.processors import ProcessorContext, build


def test_every_model_of_the_registry_has_a_licence_and_the_table_names_no_other() -> None:
    assert set(MODEL_LICENCES) == set(REGISTRY)
    assert set(MODEL_LICENCES.values()) <= set(LICENCES)
    # the words of the registry's own licence text agree with the id, where they name one
    for name, spec in REGISTRY.items():
        if "non-commercial" in spec.licence.lower() or "CC BY-NC" in spec.licence:
            assert LICENCES[spec.licence_id].commercial is False, name


def test_the_tables_the_api_decides_by_agree_with_the_workers() -> None:
    assert {name: spec.model for name, spec in DETECTORS.items()} == dict(DETECTOR_MODELS)
    converters = {name: spec.converter.name for name, spec in SWAPPERS.items() if spec.converter is not None}
    assert converters == dict(SWAPPER_CONVERTERS)
    assert set(ANALYSERS) == set(CONTENT_ANALYSERS) and RECOGNISER == DEFAULT_RECOGNISER


def test_non_commercial_disables_exactly_the_licences_that_forbid_commercial_use() -> None:
    off = {licence for licence in LICENCES if disabled(licence, ["non-commercial"])}
    assert off == {
        "cc-by-nc-4.0", "s-lab-1.0", "insightface", "wav2lip", "kim-vocal", "bria-rmbg", "corridor-key", "none-stated"
    }  # fmt: skip
    assert not disabled("unrecorded", ["non-commercial"]) and disabled("unrecorded", ["unrecorded"])
    assert not any(disabled(licence, []) for licence in LICENCES)
    with pytest.raises(ValidationError):
        Settings(disabled_licences=["no-such-licence"])  # a typo fails as the process starts, not silently


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"processors": ["background_remover"]}, ["modnet"]),
        ({"processors": ["face_blur"], "face": {"detector": "scrfd"}}, ["scrfd_2.5g"]),
        (
            {"processors": ["face_swapper"], "face": {"swapper": "ghost_2_256", "mask_types": ["box", "occlusion"]}},
            ["yunet", "ghost_2_256", RECOGNISER, "crossface_ghost", "xseg_1"],
        ),
        (
            {
                "processors": ["face_enhancer", "frame_colorizer"],
                "preset": "quality",
                "face": {"selector_mode": "reference"},
            },
            ["yunet", RECOGNISER, "gfpgan_1.4", "ddcolor"],
        ),
        ({"processors": ["lip_syncer"]}, ["yunet", "wav2lip_gan_96", "fan_68_5", "kim_vocal_2"]),
        ({"processors": ["age_modifier"]}, ["yunet", "fran", "fairface"]),
        (
            {
                "processors": ["age_modifier"],
                "age_modifier": {"model": "styleganex_age"},
                "face": {"mask_types": ["box", "occlusion"]},
            },
            ["yunet", "styleganex_age", "xseg_1"],
        ),  # fmt: skip
        ({"processors": ["deep_swapper"]}, ["yunet", "iperov/elon_musk_224"]),
        ({"processors": ["deep_swapper"], "deep_swapper": {"model": "custom/mine"}}, ["yunet"]),  # the operator's
    ],
)
def test_a_job_needs_the_models_its_options_load(options: dict[str, object], expected: list[str]) -> None:
    assert job_models(JobOptions.model_validate(options)) == expected


def test_the_content_policy_adds_its_analysers_to_every_job() -> None:
    assert job_models(JobOptions(processors=["passthrough"]), content_policy=True) == list(CONTENT_ANALYSERS)


def test_a_job_is_refused_naming_each_disabled_model_and_its_licence() -> None:
    options = JobOptions.model_validate({"processors": ["face_swapper"], "face": {"swapper": "simswap_256"}})
    with pytest.raises(LicenceDisabledError) as refused:
        check_job(job_models(options), ["non-commercial"])
    assert refused.value.code == "model_licence_disabled" and refused.value.http_status == 422
    assert "simswap_256 (cc-by-nc-4.0)" in refused.value.message
    assert f"{RECOGNISER} (insightface)" in refused.value.message and "yunet" not in refused.value.message
    check_job(job_models(options), ["mit", "gpl-3.0"])  # nothing it needs


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"processors": ["age_modifier"], "age_modifier": {"model": "styleganex_age"}}, "styleganex_age (s-lab-1.0)"),
        ({"processors": ["deep_swapper"]}, "iperov/elon_musk_224 (none-stated)"),
    ],
)
def test_an_age_or_deep_swap_job_is_refused_at_submission_naming_its_models_licence(
    options: dict[str, object], named: str
) -> None:
    with pytest.raises(LicenceDisabledError) as refused:
        check_job(job_models(JobOptions.model_validate(options)), ["non-commercial"])
    assert named in refused.value.message


@pytest.fixture
def modnet(tmp_path: Path) -> Path:
    install_replica(matting("modnet"), "modnet", tmp_path / "models")
    return tmp_path / "models"


def test_a_worker_refuses_to_load_a_model_of_a_disabled_licence(modnet: Path) -> None:
    """Whatever asked for it: the model's resolution is where every load passes."""
    settings = replica_settings(modnet, disabled_licences=["apache-2.0"])
    with pytest.raises(LicenceDisabledError, match=r"modnet \(apache-2.0\)"):
        resolve("modnet", settings)
    options = JobOptions(processors=["background_remover"])
    with pytest.raises(LicenceDisabledError) as refused:
        build("background_remover", ProcessorContext(options=options, sources=[], settings=settings))
    assert refused.value.code == "model_licence_disabled"
    assert resolve("modnet", replica_settings(modnet, disabled_licences=["non-commercial"])).is_file()


@pytest.fixture
def licences_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SWAPFARM_MODELS_DIR", str(tmp_path))
    monkeypatch.setenv("SWAPFARM_DISABLED_LICENCES", '["non-commercial", "agpl-3.0"]')
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_models_list_shows_each_models_licence_and_whether_it_is_disabled(licences_env: None) -> None:
    listed = CliRunner().invoke(app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    models = {m["name"]: m for m in json.loads(listed.output)}
    assert set(models) == set(REGISTRY)
    assert models["modnet"]["licence_id"] == "apache-2.0" and models["modnet"]["disabled"] is False
    assert models["rmbg_2.0"]["licence_id"] == "bria-rmbg" and models["rmbg_2.0"]["disabled"] is True
    assert models["rmbg_2.0"]["commercial_use"] is False
    assert models["yoloface_8n"]["disabled"] is True  # named by its id
    assert models["hyperswap_1a_256"]["disabled"] is False and models["hyperswap_1a_256"]["commercial_use"] is None
    table = CliRunner().invoke(app, ["list"], env={"COLUMNS": "320"})
    rows = {name: next(line for line in table.output.splitlines() if f" {name} " in line) for name in REGISTRY}
    assert "disabled" in rows["codeformer"] and "s-lab-1.0" in rows["codeformer"]
    assert "allowed" in rows["gfpgan_1.4"] and "apache-2.0" in rows["gfpgan_1.4"]


def test_swapfarm_run_refuses_a_job_that_needs_a_disabled_licence_before_it_renders(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=1, size="64x64")
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "200", "SWAPFARM_DISABLED_LICENCES": '["bria-rmbg"]'}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--target", str(clip), "--processor", "background_remover",
         "--options", '{"background_remover": {"model": "rmbg_1.4"}}', "-o", str(tmp_path / "out.mp4"),
         "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "model_licence_disabled" in done.stderr and "rmbg_1.4 (bria-rmbg)" in done.stderr, done.stderr
    assert not (tmp_path / "out.mp4").exists()
