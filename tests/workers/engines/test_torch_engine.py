"""The compiled torch engine on the CPU: parity with ONNX Runtime, one graph, bounded compiles, the compile cache,
the eager fallback, memory fitting, and loading it for the face models.

torch.compile on two CPU cores is slow (a C++ compile per fused kernel): the swapper's full-size replica is
compiled once (the issue's headline parity and graph check); every other architecture is compiled at the
replicas' reduced widths and a single bucket; the bucket test uses a tiny model. Every test shares one compile
cache folder, so a graph compiled twice is built once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from shared.settings import CompileMode
from tests.support import replicas
from tests.support.faces import clip_frames, detector, psnr
from tests.support.replicas import install_replica, realistic_emap, replica_settings
from workers.engines.capability import CpuCapability
from workers.engines.choosing import EngineChoice, choose_engine, compile_mode
from workers.engines.compiling import MemoryNotes, buckets, conversion, plan_calls
from workers.engines.loading import load_model
from workers.engines.onnx import OnnxEngine
from workers.engines.onnx_to_torch import OnnxModule, convert
from workers.engines.torch_engine import TorchEngine
from workers.faces.cropping import gather_crops
from workers.faces.enhancing import ENHANCERS, FaceEnhancer
from workers.faces.swapping import SWAPPERS, EmapProjection, FaceSwapper
from workers.warming import warm_in_background

Array = npt.NDArray[Any]
FP32_TOLERANCE = 1e-3
"""Max abs difference allowed between compiled torch (fp32) and ONNX Runtime; measured: ≈3e-5 full-size."""
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One Inductor cache for this module's tests (never the user's), restored afterwards."""
    folder = tmp_path_factory.mktemp("torch-compile")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder))
        yield folder


def _reference(model: onnx.ModelProto, feeds: Mapping[str, Array]) -> list[Array]:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the replicas' unused emap initializer
    session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    outputs: list[Array] = session.run(None, dict(feeds))
    return outputs


def _feeds(model: onnx.ModelProto, batch: int) -> dict[str, Array]:
    feeds: dict[str, Array] = {}
    for value in model.graph.input:
        dims = [d.dim_value or batch for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == TensorProto.DOUBLE:
            feeds[value.name] = np.array([0.3])
        else:
            feeds[value.name] = RNG.uniform(-1, 1, dims).astype(np.float32)
    return feeds


def _engine(module: OnnxModule, mode: CompileMode = "default", max_batch: int = 1, **kwargs: Any) -> TorchEngine:
    return TorchEngine(module, mode=mode, max_batch=max_batch, **kwargs)


@pytest.fixture(scope="module")
def full_inswapper() -> tuple[onnx.ModelProto, OnnxModule]:
    model = replicas.inswapper_128(width=1.0)
    return model, convert(model)


@pytest.mark.slow
def test_compiled_full_size_inswapper_matches_onnxruntime_as_one_graph(
    full_inswapper: tuple[onnx.ModelProto, OnnxModule],
) -> None:
    model, module = full_inswapper
    feeds = _feeds(model, batch=1)
    counters: Any = torch._dynamo.utils.counters
    counters.clear()
    engine = _engine(module)
    (output,) = engine.run(feeds)
    (expected,) = _reference(model, feeds)
    assert np.abs(output - expected).max() <= FP32_TOLERANCE
    assert counters["stats"]["unique_graphs"] == 1
    assert sum(counters["graph_break"].values()) == 0
    assert engine.stats.compiles == 1 and engine.stats.eager_fallbacks == 0


@pytest.mark.parametrize("fp16", [False, True])
def test_dynamo_explain_sees_the_swapper_as_one_graph_without_breaks(fp16: bool) -> None:
    model = replicas.inswapper_128(fp16=fp16)  # the full-size graph is checked by dynamo's counters above
    args = [torch.from_numpy(feed) for feed in _feeds(model, batch=2).values()]
    with torch.inference_mode():
        explained = torch._dynamo.explain(convert(model))(*args)
    assert explained.graph_count == 1
    assert explained.graph_break_count == 0, explained.break_reasons


# inswapper_128_fp16 converts to the inswapper graph compiled above (its fp16 weights computed in the engine's
# precision): its eager parity is in test_onnx_to_torch.py, its single graph in the explain test.
REDUCED: Mapping[str, Callable[[], onnx.ModelProto]] = {
    "hyperswap_1a_256": replicas.hyperswap_1a_256,
    "simswap_256": replicas.simswap_256,
    "gfpgan_1.4": replicas.gfpgan_1_4,
    "gpen_bfr_512": replicas.gpen_bfr_512,
    "codeformer": replicas.codeformer,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REDUCED))
def test_compiled_reduced_architectures_match_onnxruntime(name: str) -> None:
    model = REDUCED[name]()
    feeds = _feeds(model, batch=2)  # two calls of bucket 1
    engine = _engine(convert(model))
    for got, want in zip(engine.run(feeds), _reference(model, feeds), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.abs(got - want).max() <= FP32_TOLERANCE
    assert engine.stats.eager_fallbacks == 0


def _tiny(channels: int = 3) -> onnx.ModelProto:
    """Conv → LeakyRelu → + input: small enough to compile six buckets in seconds."""
    weight = numpy_helper.from_array(RNG.standard_normal((channels, channels, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.2),
        helper.make_node("Add", ["l", "x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", channels, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", channels, 8, 8])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.slow
def test_batches_of_1_to_33_compile_at_most_once_per_bucket() -> None:
    model = _tiny()
    engine = _engine(convert(model), max_batch=32)
    assert engine.buckets == (1, 2, 4, 8, 16, 32)
    counters: Any = torch._dynamo.utils.counters
    counters.clear()
    for size in range(1, 34):
        feeds = {"x": RNG.standard_normal((size, 3, 8, 8)).astype(np.float32)}
        (output,) = engine.run(feeds)
        assert output.shape == (size, 3, 8, 8)
        if size in {3, 33}:
            assert np.abs(output - _reference(model, feeds)[0]).max() <= FP32_TOLERANCE
    assert counters["stats"]["unique_graphs"] <= len(engine.buckets)
    assert engine.stats.compiles == len(engine.buckets)


def test_buckets_are_powers_of_two_up_to_the_limit() -> None:
    assert buckets(1) == (1,)
    assert buckets(8) == (1, 2, 4, 8)
    assert buckets(12) == (1, 2, 4, 8, 12)


def test_a_compile_failure_falls_back_to_eager_with_a_warning_and_a_count(caplog: pytest.LogCaptureFixture) -> None:
    model = _tiny()

    def broken(module: torch.nn.Module, mode: CompileMode) -> Callable[..., tuple[torch.Tensor, ...]]:
        def run(*args: torch.Tensor) -> tuple[torch.Tensor, ...]:
            raise RuntimeError("inductor: C++ compile failed")

        return run

    engine = _engine(convert(model), compiler=broken)
    feeds = {"x": RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)}
    with caplog.at_level(logging.WARNING, "workers.engines.torch_engine"):
        (output,) = engine.run(feeds)
        engine.run(feeds)
    assert np.abs(output - _reference(model, feeds)[0]).max() <= FP32_TOLERANCE
    assert engine.stats.eager_fallbacks == 1 and engine.mode == "eager"
    assert "C++ compile failed" in (engine.stats.fallback_reason or "")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "running this model eagerly" in caplog.records[0].getMessage()


class FakeMemory:
    """A device whose measured peaks come from a list: 100 MiB per item."""

    def __init__(self, free: int, peaks: list[int]) -> None:
        self.free, self.peaks = free, iter(peaks)

    @property
    def device(self) -> str:
        return "fake:0"

    def free_bytes(self) -> int:
        return self.free

    def used_bytes(self) -> int:
        return 0

    def reset_peak(self) -> None:
        return None

    def peak_bytes(self) -> int:
        return next(self.peaks)

    def release(self) -> None:
        return None

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False


def test_warmup_compiles_the_largest_bucket_only_and_fits_the_buckets_to_free_memory(tmp_path: Path) -> None:
    mib = 2**20
    memory = FakeMemory(free=450 * mib, peaks=[800 * mib])  # bucket 8's second run: 100 MiB per item
    notes = MemoryNotes(tmp_path)
    engine = _engine(convert(_tiny()), mode="eager", max_batch=8, memory=memory, notes=notes, notes_key="tiny")
    engine.warmup()
    assert engine.stats.warmed_buckets == [8]
    assert engine.per_item_bytes == 100 * mib
    assert engine.buckets == (1, 2)  # 450 MiB × 0.8 holds 3 items: the power of two below is 2
    assert notes.get("tiny") == 100 * mib  # kept beside the compile cache for the next process

    restarted = _engine(convert(_tiny()), mode="eager", max_batch=8, memory=FakeMemory(450 * mib, []),
                        notes=MemoryNotes(tmp_path), notes_key="tiny")  # fmt: skip
    restarted.prepare()  # no run, no measurement (FakeMemory has no peaks to give)
    assert restarted.per_item_bytes == 100 * mib and restarted.buckets == (1, 2)


def test_a_batch_is_split_rather_than_padded_past_a_tenth_of_its_size() -> None:
    assert plan_calls(42, buckets(64)) == [(32, 32), (8, 8), (2, 2)]
    assert plan_calls(15, buckets(16)) == [(15, 16)]
    assert plan_calls(7, buckets(8)) == [(4, 4), (2, 2), (1, 1)]
    assert plan_calls(19, buckets(8)) == [(8, 8), (8, 8), (2, 2), (1, 1)]
    for count in range(1, 200):
        calls = plan_calls(count, buckets(64))
        assert sum(items for items, _ in calls) == count
        assert all(bucket - items <= 0.1 * bucket for items, bucket in calls)
    engine = _engine(convert(_tiny()), mode="eager", max_batch=64)
    engine.run({"x": RNG.standard_normal((42, 3, 8, 8)).astype(np.float32)})
    assert (engine.stats.computed_items, engine.stats.padded_items) == (42, 0)


@pytest.mark.slow
def test_the_compile_cache_setting_is_where_compiled_graphs_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted worker finds them there (the speed-up is a benchmark figure: benchmarks/torch_engine_cpu.py)."""
    path = tmp_path / "tiny.onnx"
    onnx.save(_tiny(channels=5), str(path))  # a graph no other test compiles: nothing to reuse in memory
    cache = tmp_path / "compile-cache"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "elsewhere"))  # restored after the test
    engine = TorchEngine.load(
        path, device="cpu", precision="fp32", mode="default", max_batch=1, memory=None, safety=0.8, cache_dir=cache
    )
    engine.warmup()
    assert engine.stats.compiles == 1
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache.resolve())
    assert any(p.is_file() for p in (cache / "fxgraph").rglob("*")), sorted(p.name for p in cache.iterdir())


AMX = CpuCapability(isa="AVX512", amx=True, avx512_bf16=True)
AVX512_BF16 = CpuCapability(isa="AVX512", avx512_bf16=True)
AVX2 = CpuCapability(isa="AVX2")


def test_auto_picks_bf16_torch_on_cpus_with_native_bf16_and_onnxruntime_without(tmp_path: Path) -> None:
    settings = replica_settings(tmp_path, engine="auto")
    for capability in (AMX, AVX512_BF16):
        choice = choose_engine(settings, "cpu", "inswapper_128", cpu=lambda c=capability: c)
        assert (choice.engine, choice.precision, choice.trial) == ("torch", "bf16", True), "timed on first use"
        assert "bf16 natively" in choice.reason
    plain = choose_engine(settings, "cpu", "inswapper_128", cpu=lambda: AVX2)
    assert (plain.engine, plain.precision) == ("onnxruntime", "fp32") and "no native bf16" in plain.reason
    assert not plain.trial
    for pinned in ({"engine": "torch"}, {"torch_precision": "int8"}, {"model_engines": {"inswapper_128": "torch"}}):
        set_ = choose_engine(settings.model_copy(update=pinned), "cpu", "inswapper_128", cpu=lambda: AMX)
        assert set_.engine == "torch" and not set_.trial, pinned
    fp32 = settings.model_copy(update={"torch_precision": "fp32"})
    assert choose_engine(fp32, "cpu", "inswapper_128", cpu=lambda: AMX).engine == "onnxruntime"
    assert choose_engine(settings, "openvino", "inswapper_128", cpu=lambda: AMX).engine == "onnxruntime"


def test_auto_picks_compiled_torch_on_gpus_and_overrides_win(tmp_path: Path) -> None:
    settings = replica_settings(
        tmp_path, engine="auto", model_engines={"codeformer": "torch", "gfpgan_1.4": "onnxruntime"}
    )
    assert choose_engine(settings, "cuda", "inswapper_128", cpu=lambda: AMX) == EngineChoice(
        "torch", "fp32", "auto: compiled torch on cuda (measured faster than ONNX Runtime)"
    )
    assert choose_engine(settings, "rocm", "gpen_bfr_512", cpu=lambda: AVX2).engine == "torch"
    assert choose_engine(settings, "cpu", "codeformer", cpu=lambda: AVX2) == EngineChoice(
        "torch", "fp32", "compiled torch in fp32, as set"
    )
    assert choose_engine(settings, "cuda", "gfpgan_1.4", cpu=lambda: AMX).engine == "onnxruntime"
    assert compile_mode(settings, "cuda") == "max-autotune" and compile_mode(settings, "cpu") == "default"
    assert compile_mode(settings.model_copy(update={"torch_compile_mode": "eager"}), "cuda") == "eager"


@pytest.mark.slow
def test_an_enhancer_set_to_torch_loads_warm_and_restores_like_onnxruntime(tmp_path: Path) -> None:
    models = tmp_path / "models"
    path = install_replica(replicas.gfpgan_1_4(), "gfpgan_1.4", models)
    settings = replica_settings(
        models,
        engine="torch",
        torch_precision="fp32",
        torch_compile_mode="default",  # the graph the parity test compiled: a cache hit
        torch_max_batch=1,
        torch_compile_cache_dir=Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]),
    )
    loaded = load_model(path, settings, name="gfpgan_1.4", batch_input="input")
    assert isinstance(loaded.engine, TorchEngine)
    assert loaded.engine.stats.compiles == 0  # lazily: when a batch first runs
    assert loaded.batches.limit == 1
    enhancer = FaceEnhancer.load("gfpgan_1.4", settings)
    assert enhancer.engine is loaded.engine  # loaded once per process
    crops = RNG.integers(0, 256, (2, 512, 512, 3), dtype=np.uint8)
    reference = FaceEnhancer(ENHANCERS["gfpgan_1.4"], OnnxEngine.load(path, settings))
    difference = np.abs(enhancer.enhance(crops).astype(int) - reference.enhance(crops).astype(int))
    assert difference.max() <= 1  # uint8 rounding of outputs within 1e-3
    assert loaded.engine.stats.compiles == 1 and loaded.degradations() == []


BF16_MEAN_TOLERANCE, BF16_MAX_TOLERANCE = 1e-2, 0.25
"""bf16 vs fp32 on the replicas (outputs in [0, 1] or [-1, 1]): mean |Δ| ≤ 0.01 (≈2.5 of 255 levels), max |Δ| ≤ 0.25
at a few pixels; measured on the reduced replicas (eager): mean 0.001–0.006, max 0.006–0.14."""


@pytest.mark.parametrize("name", ["inswapper_128", "hyperswap_1a_256", "simswap_256", "gfpgan_1.4", "codeformer"])
def test_bf16_outputs_stay_close_to_fp32(name: str) -> None:
    model = {"inswapper_128": replicas.inswapper_128, **REDUCED}[name]()
    feeds = _feeds(model, batch=2)
    (fp32,) = _engine(convert(model), mode="eager", max_batch=2).run(feeds)[:1]
    bf16_module = convert(model, **conversion("bf16"))  # as the engine converts for bf16: mixed precision
    (bf16,) = _engine(bf16_module, mode="eager", precision="bf16", max_batch=2).run(feeds)[:1]
    assert bf16.dtype == np.float32
    assert np.abs(bf16 - fp32).mean() <= BF16_MEAN_TOLERANCE
    assert np.abs(bf16 - fp32).max() <= BF16_MAX_TOLERANCE


BF16_MIN_PSNR = 35.0
"""Swapped crops, bf16 vs fp32 (docs/engines.md's tolerance; the d18 job end to end is checked against it too, in
tests/integration/test_face_engine_jobs.py). Measured: ≈43 dB on d18's faces with the reduced replica."""


def test_bf16_swapped_crops_of_real_faces_stay_within_35_db_of_fp32(tmp_path: Path) -> None:
    model = replicas.inswapper_128()
    path = tmp_path / "inswapper_128.onnx"
    onnx.save(model, str(path))
    frames = clip_frames("d18.mp4", slice(0, 48, 6))
    faces = gather_crops(frames, detector().detect(frames), SWAPPERS["inswapper_128"].model.template, 128)
    assert len(faces) == 8
    emap = EmapProjection(realistic_emap())
    fp32 = FaceSwapper(SWAPPERS["inswapper_128"], OnnxEngine.load(path, replica_settings(tmp_path)), emap)
    bf16_engine = _engine(convert(path, **conversion("bf16")), mode="eager", precision="bf16", max_batch=8)
    bf16 = FaceSwapper(SWAPPERS["inswapper_128"], bf16_engine, emap)
    latent = fp32.source_latent(RNG.standard_normal((1, 512)).astype(np.float32))
    want, got = fp32.swap(faces.crops, latent), bf16.swap(faces.crops, latent)
    values = [psnr(a, b) for a, b in zip(want, got, strict=True)]
    assert min(values) >= BF16_MIN_PSNR, values


def test_warm_models_are_loaded_and_compiled_on_a_thread_as_a_worker_process_starts(tmp_path: Path) -> None:
    models = tmp_path / "models"
    path = install_replica(replicas.gfpgan_1_4(), "gfpgan_1.4", models)
    settings = replica_settings(
        models,
        engine="torch",
        torch_precision="fp32",
        torch_compile_mode="default",
        torch_max_batch=1,
        warm_models=["gfpgan_1.4"],
        torch_compile_cache_dir=Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]),
    )
    warm_in_background(settings).join(timeout=240)
    loaded = load_model(path, settings, name="gfpgan_1.4", batch_input="input")  # the warmed one, from the cache
    assert isinstance(loaded.engine, TorchEngine) and loaded.engine.stats.warmed_buckets == [1]
