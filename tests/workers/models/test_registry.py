"""The model registry: every selectable model is known, its facts hang together, its URLs are FaceFusion's."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from cli.models import app
from shared.options import Enhancer, Swapper, choices
from shared.settings import get_settings
from tests.support.deep_swap_replicas import dfm
from tests.support.replicas import identity_swapper, install_replica
from workers.faces.enhancing import ENHANCERS
from workers.faces.swapping import SWAPPERS
from workers.models.custom import CUSTOM_LICENCE
from workers.models.download import model_urls, sha256_of
from workers.models.registry import REGISTRY

DATA_MODELS = Path(__file__).resolve().parents[4] / "shared" / "data" / "models"


def test_every_selectable_swapper_and_enhancer_has_a_registry_entry_and_a_recipe() -> None:
    assert set(SWAPPERS) == set(choices(Swapper))
    assert set(ENHANCERS) == set(choices(Enhancer))
    for name in [*choices(Swapper), *choices(Enhancer)]:
        assert name in REGISTRY
    assert {spec.model.kind for spec in SWAPPERS.values()} == {"swapper"}
    assert {spec.model.kind for spec in ENHANCERS.values()} == {"enhancer"}
    assert SWAPPERS["simswap_256"].converter is REGISTRY["crossface_simswap"]


def test_the_yunet_entry_matches_the_real_opencv_zoo_file() -> None:
    yunet = DATA_MODELS / "yunet_2023mar.onnx"
    assert REGISTRY["yunet"].sha256 == sha256_of(yunet)
    assert REGISTRY["yunet"].size_bytes == yunet.stat().st_size


def test_models_that_take_face_crops_say_how_to_make_them() -> None:
    for spec in REGISTRY.values():
        takes_crops = spec.kind in {
            "recognizer", "swapper", "enhancer", "classifier", "lip_syncer", "age_modifier", "deep_swapper"
        }  # fmt: skip
        assert (spec.template is not None) == takes_crops, spec.name
        # embeddings, 5 points, audio spectra, LivePortrait's volumes and keypoints
        takes_vectors = spec.kind in {"embedding_converter", "voice_extractor"} or spec.name in {
            "fan_68_5", "live_portrait_generator", "live_portrait_eye_retargeter", "live_portrait_lip_retargeter",
            "live_portrait_stitcher",
        }  # fmt: skip
        if not takes_vectors:
            assert spec.input_size and spec.normalisation and spec.colour_order, spec.name
        assert spec.sha256 is None or len(spec.sha256) == 64, spec.name
        assert spec.input_names and spec.output_names and spec.licence, spec.name


def test_insightface_weights_carry_their_non_commercial_licence() -> None:
    for name in ("inswapper_128", "inswapper_128_fp16", "arcface_w600k_r50", "scrfd_2.5g", "retinaface_10g"):
        assert "non-commercial" in REGISTRY[name].licence


def test_urls_follow_the_github_release_and_hugging_face_layouts() -> None:
    urls = model_urls(
        REGISTRY["hyperswap_1a_256"],
        [
            "https://github.com/facefusion/facefusion-assets/releases/download",
            "https://huggingface.co/facefusion/",
        ],
    )
    assert urls == [
        "https://github.com/facefusion/facefusion-assets/releases/download/models-3.3.0/hyperswap_1a_256.onnx",
        "https://huggingface.co/facefusion/models-3.3.0/resolve/main/hyperswap_1a_256.onnx",
    ]


@pytest.fixture
def cli_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An offline folder the CLI's settings point at (through the environment, as in production)."""
    offline = tmp_path / "offline"
    offline.mkdir()
    monkeypatch.setenv("SWAPFARM_MODELS_DIR", str(offline))
    monkeypatch.setenv("SWAPFARM_MODEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SWAPFARM_MODEL_BASE_URLS", "[]")
    get_settings.cache_clear()
    yield offline
    get_settings.cache_clear()


def test_cli_lists_every_model(cli_models: Path) -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "320"})
    assert result.exit_code == 0
    for name in REGISTRY:
        assert name in result.output


def test_cli_lists_the_frame_enhancers_with_their_licence(cli_models: Path) -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "320"})
    rows = [line for line in result.output.splitlines() if "real_esrgan_x" in line]
    assert len(rows) == 4 and all("frame_enhancer" in row and "BSD-3-Clause" in row for row in rows)


def test_cli_lists_the_frame_colorizers_with_their_licence(cli_models: Path) -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "320"})
    rows = {name: [line for line in result.output.splitlines() if f" {name} " in f" {line} "] for name in (
        "ddcolor", "ddcolor_artistic", "deoldify", "deoldify_artistic", "deoldify_stable"
    )}  # fmt: skip
    assert all(len(found) == 1 and "frame_colorizer" in found[0] for found in rows.values()), rows
    assert all("Apache-2.0" in rows[name][0] for name in ("ddcolor", "ddcolor_artistic"))
    assert all("MIT" in rows[name][0] for name in ("deoldify", "deoldify_artistic", "deoldify_stable"))


def test_cli_lists_livePortraits_six_files_with_their_licence(cli_models: Path) -> None:
    result = CliRunner().invoke(app, ["list"], env={"COLUMNS": "320"})
    rows = [line for line in result.output.splitlines() if " live_portrait_" in f" {line}"]
    assert len(rows) == 6 and all("live_portrait" in row and "MIT" in row for row in rows), rows


def test_cli_verify_reports_each_status_and_fails_on_a_wrong_file(cli_models: Path) -> None:
    shutil.copy(DATA_MODELS / "yunet_2023mar.onnx", cli_models / "yunet_2023_mar.onnx")
    ok = CliRunner().invoke(app, ["verify", "yunet"], env={"COLUMNS": "320"})
    assert ok.exit_code == 0, ok.output
    assert "verified" in ok.output

    install_replica(identity_swapper(), "inswapper_128_fp16", cli_models)
    wrong = CliRunner().invoke(app, ["verify"], env={"COLUMNS": "320"})
    assert wrong.exit_code == 1
    assert "mismatch" in wrong.output and "missing" in wrong.output


def test_cli_download_fails_for_a_model_it_cannot_get(cli_models: Path) -> None:
    result = CliRunner().invoke(app, ["download", "gfpgan_1.4"], env={"COLUMNS": "320"})
    assert result.exit_code == 1
    assert "gfpgan_1.4" in result.output


def test_cli_lists_the_age_and_deep_swap_models_with_their_licences_and_the_operators_own(cli_models: Path) -> None:
    """The catalogue's DeepFaceLive models and the operator's ``custom/<stem>`` files beside them (a file whose stem
    a job could not name is not listed)."""
    (cli_models / "custom").mkdir()
    onnx.save(dfm(side=128, morph=False), str(cli_models / "custom" / "mine.dfm"))
    (cli_models / "custom" / "not a name.dfm").write_bytes(b"")
    listed = CliRunner().invoke(app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.output)}
    assert rows["fran"]["kind"] == rows["styleganex_age"]["kind"] == "age_modifier"
    assert "MIT" in rows["fran"]["licence"] and "non-commercial" in rows["styleganex_age"]["licence"]
    deep = {name for name, row in rows.items() if row["kind"] == "deep_swapper"}
    assert len(deep) == 158 and "iperov/elon_musk_224" in deep and "custom/mine" in deep
    assert rows["custom/mine"]["file"] == "custom/mine.dfm" and rows["custom/mine"]["licence"] == CUSTOM_LICENCE
    assert not [name for name in rows if "not a name" in name]
    table = CliRunner().invoke(app, ["list"], env={"COLUMNS": "320"})
    assert [line for line in table.output.splitlines() if " custom/mine " in f" {line} "]
