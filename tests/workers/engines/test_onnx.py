"""The ONNX Runtime engine: which providers it picks, one session per model file, and how it runs batches."""

from __future__ import annotations

import importlib.util
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from shared.errors import ModelError
from shared.options import FaceOptions
from shared.settings import Settings
from tests.support.faces import MODELS, cpu_settings
from tests.support.replicas import (
    arcface_w600k_r50,
    codeformer,
    identity_swapper,
    install_replica,
    replica_settings,
)
from workers.engines.capability import CpuCapability
from workers.engines.family import detect_family, family_from_providers
from workers.engines.loading import load_model, loads, release_models
from workers.engines.onnx import OnnxEngine, cached_models, choose_providers, describe_options, provider_options
from workers.faces.detection import DETECTOR_THREADS, FaceDetector

ALL_PROVIDERS = [
    "CPUExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
    "OpenVINOExecutionProvider",
    "CoreMLExecutionProvider",
]


@pytest.mark.parametrize(
    ("family", "expected"),
    [
        ("cuda", ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")),
        ("rocm", ("MIGraphXExecutionProvider", "ROCMExecutionProvider", "CPUExecutionProvider")),
        ("openvino", ("OpenVINOExecutionProvider", "CPUExecutionProvider")),
        ("mps", ("CoreMLExecutionProvider", "CPUExecutionProvider")),
        ("cpu", ("CPUExecutionProvider",)),
    ],
)
def test_providers_are_ordered_best_first_for_each_family(family: str, expected: tuple[str, ...]) -> None:
    assert choose_providers(family, ALL_PROVIDERS) == expected  # type: ignore[arg-type]


def test_providers_this_build_lacks_are_left_out() -> None:
    assert choose_providers("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"]) == (
        "CUDAExecutionProvider",
        "CPUExecutionProvider",
    )


def test_an_explicit_provider_list_overrides_the_family(caplog: pytest.LogCaptureFixture) -> None:
    assert choose_providers("cuda", ALL_PROVIDERS, ["CPUExecutionProvider"]) == ("CPUExecutionProvider",)
    with caplog.at_level(logging.WARNING):
        chosen = choose_providers("cpu", ["CPUExecutionProvider"], ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert chosen == ("CPUExecutionProvider",)
    assert "CUDAExecutionProvider" in caplog.text
    with pytest.raises(ModelError, match="CUDAExecutionProvider"):
        choose_providers("cpu", ["CPUExecutionProvider"], ["CUDAExecutionProvider"])


NATIVE_BF16 = CpuCapability(isa="AVX512", avx512_bf16=True)
AMX = CpuCapability(isa="AVX512", amx=True, avx512_bf16=True)
NO_BF16 = CpuCapability(isa="AVX512")


@pytest.mark.parametrize(
    ("capability", "precision", "hint"),
    [
        (NATIVE_BF16, "bf16", "bf16"),
        (AMX, "bf16", "bf16"),
        (NO_BF16, "bf16", "f32"),  # asked for, but the CPU would emulate it: fp32
        (CpuCapability(isa="AVX2"), "bf16", "f32"),
        (NATIVE_BF16, "fp32", "f32"),
        (AMX, "fp32", "f32"),  # named: OpenVINO would pick bf16 by itself on AMX
    ],
)
def test_openvino_runs_on_the_cpu_device_in_bf16_only_where_asked_and_the_cpu_computes_it_natively(
    capability: CpuCapability, precision: str, hint: str, tmp_path: Path
) -> None:
    settings = replica_settings(tmp_path, openvino_precision=precision)
    options = provider_options("OpenVINOExecutionProvider", settings, cpu=lambda: capability)
    assert options["device_type"] == "CPU"
    assert json.loads(options["load_config"]) == {"CPU": {"INFERENCE_PRECISION_HINT": hint}}
    assert f'"INFERENCE_PRECISION_HINT": "{hint}"' in describe_options(options)
    assert provider_options("CPUExecutionProvider", settings) == {}
    assert describe_options({}) == "default options"


def test_the_family_comes_from_the_setting_or_from_what_is_installed() -> None:
    assert detect_family(Settings(environment="test", family="rocm")) == "rocm"
    installed = family_from_providers(onnxruntime.get_available_providers())
    if installed is not None or importlib.util.find_spec("torch") is None:
        assert detect_family(Settings(environment="test", family="auto")) == (installed or "cpu")
    assert family_from_providers(["CPUExecutionProvider", "CUDAExecutionProvider"]) == "cuda"
    assert family_from_providers(["CPUExecutionProvider", "MIGraphXExecutionProvider"]) == "rocm"
    assert family_from_providers(["CPUExecutionProvider"]) is None


def test_an_engine_runs_on_cpu_here_and_logs_its_providers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "models")
    with caplog.at_level(logging.INFO, logger="workers.engines.onnx"):
        engine = OnnxEngine.load(path, replica_settings(tmp_path / "models", family="auto"))
    assert engine.providers == ("CPUExecutionProvider",)
    assert "CPUExecutionProvider" in caplog.text
    assert engine.input_names == ("input",) and engine.output_names == ("output",)


def test_idle_intra_op_threads_sleep_rather_than_spin_so_the_jobs_other_stages_keep_the_cores(tmp_path: Path) -> None:
    path = install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "models")
    options = OnnxEngine.load(path, replica_settings(tmp_path / "models"))._session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_an_override_naming_an_unavailable_provider_still_runs_on_what_is_left(tmp_path: Path) -> None:
    path = install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "models")
    settings = replica_settings(
        tmp_path / "models", execution_providers=["TensorrtExecutionProvider", "CPUExecutionProvider"]
    )
    assert OnnxEngine.load(path, settings).providers == ("CPUExecutionProvider",)


def test_a_model_file_is_loaded_once_per_process(tmp_path: Path) -> None:
    path = install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "models")
    settings = replica_settings(tmp_path / "models")
    first, second = OnnxEngine.load(path, settings), OnnxEngine.load(path, settings)
    assert first._session is second._session


@pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")
def test_a_detector_exported_at_one_size_takes_any_size_once_freed_and_is_released_with_its_engine(
    tmp_path: Path,
) -> None:
    """YuNet's file takes 640×640 only; freed of its spatial size it runs a 1280×736 picture at once (its outputs
    sized by the picture), and forgetting the engine's session forgets the freed one too."""
    path = tmp_path / "yunet_2023mar.onnx"
    shutil.copyfile(MODELS / "yunet_2023mar.onnx", path)
    fixed = OnnxEngine.load(path, cpu_settings())
    picture = {"input": np.zeros((1, 3, 736, 1280), np.float32)}
    with pytest.raises(Exception, match="dimensions"):
        fixed.run(picture)
    freed = fixed.any_size()
    assert fixed.any_size() is freed and freed.any_size() is freed
    named = dict(zip(freed.output_names, freed.run(picture), strict=True))
    sizes = [named[f"cls_{stride}"].shape for stride in (8, 16, 32)]
    assert sizes == [(1, 92 * 160, 1), (1, 46 * 80, 1), (1, 23 * 40, 1)]
    assert cached_models().count(path.resolve()) == 2
    fixed.release()
    assert path.resolve() not in cached_models()


@pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")
def test_a_detector_runs_on_a_session_of_one_thread_of_its_own_its_freed_size_too(tmp_path: Path) -> None:
    """A detector's callers run it from several threads at once: its session has one intra-op thread (the freed
    size's too), kept apart from a session of the same file with ONNX Runtime's default threads."""
    path = tmp_path / "yunet_2023_mar.onnx"  # the registry's file name
    shutil.copyfile(MODELS / "yunet_2023mar.onnx", path)
    settings = cpu_settings()
    detector = FaceDetector.load(FaceOptions(detector="yunet"), settings.model_copy(update={"models_dir": tmp_path}))
    assert isinstance(detector.engine, OnnxEngine)
    one, freed = detector.engine, detector.engine.any_size()
    default = OnnxEngine.load(path, settings)
    threads = [engine._session.get_session_options().intra_op_num_threads for engine in (one, freed, default)]
    assert threads == [DETECTOR_THREADS, DETECTOR_THREADS, 0] and DETECTOR_THREADS == 1
    assert default._session is not one._session
    assert cached_models().count(path.resolve()) == 3
    one.release()
    default.release()


def test_released_models_are_loaded_again_on_their_next_use(tmp_path: Path) -> None:
    """What a process does between unrelated parts of its work (the test suite: between modules): its models and
    sessions are forgotten, so their memory can go, and the next use loads the file again."""
    path = install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "models")
    settings = replica_settings(tmp_path / "models")
    loaded = load_model(path, settings, name="arcface_w600k_r50", batch_input="input")
    before = loads()["arcface_w600k_r50"]
    assert load_model(path, settings, name="arcface_w600k_r50", batch_input="input") is loaded
    release_models()
    assert path.resolve() not in cached_models()
    again = load_model(path, settings, name="arcface_w600k_r50", batch_input="input")
    assert again is not loaded and loads()["arcface_w600k_r50"] == before + 1
    assert path.resolve() in cached_models()


def test_run_batches_any_size_and_casts_to_the_declared_dtypes(tmp_path: Path) -> None:
    path = install_replica(arcface_w600k_r50(), "arcface_w600k_r50", tmp_path / "models")
    engine = OnnxEngine.load(path, replica_settings(tmp_path / "models"))
    crops = np.random.default_rng(0).random((5, 3, 112, 112))  # float64: cast to the model's float32
    (embeddings,) = engine.run({"input": crops})
    assert embeddings.shape == (5, 512) and embeddings.dtype == np.float32
    assert engine.fixed_batch("input") is None
    with pytest.raises(ValueError, match="input"):
        engine.run({"image": crops})


def test_a_fixed_batch_model_says_so(tmp_path: Path) -> None:
    path = install_replica(identity_swapper(batch=1), "inswapper_128", tmp_path / "models")
    engine = OnnxEngine.load(path, replica_settings(tmp_path / "models"))
    assert engine.fixed_batch("target") == 1
    assert engine.input_shape("target") == (1, 3, 128, 128)


def test_warmup_runs_every_input_including_codeformers_double_weight(tmp_path: Path) -> None:
    path = install_replica(codeformer(), "codeformer", tmp_path / "models")
    engine = OnnxEngine.load(path, replica_settings(tmp_path / "models"))
    engine.warmup()
    (output,) = engine.run({"input": np.zeros((2, 3, 512, 512), np.float32), "weight": np.array([0.5])})
    assert output.shape == (2, 3, 512, 512)


def test_a_file_that_is_not_a_model_is_a_model_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"not onnx")
    with pytest.raises(ModelError, match="broken.onnx"):
        OnnxEngine.load(path, replica_settings(tmp_path))
