"""``auto`` on a CPU with native bf16: each model starts on ONNX Runtime, is timed against the compiled torch engine
on first use, runs on the faster, and a later process loads the kept winner without a trial."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.support.quant_replicas import crops, outlier_channel, well_quantised
from tests.support.replicas import replica_settings
from workers.doctor import diagnose
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches
from workers.engines.capability import probe_cpu
from workers.engines.choosing import choose_engine
from workers.engines.loading import LoadedModel, kept_trial, load_model, loads, trial_key
from workers.engines.memory import HostMemory
from workers.engines.onnx import OnnxEngine, cached_models
from workers.engines.torch_engine import TorchEngine
from workers.engines.trials import ROUNDS, Trial, TrialBook, TrialEngine

ROOT = Path(__file__).resolve().parents[3]
native_bf16 = pytest.mark.skipif(not probe_cpu().native_bf16, reason="auto puts models on trial only where the CPU "
                                 "computes bf16 natively")  # fmt: skip


def _conv_model(seed: int = 0) -> onnx.ModelProto:
    """Two 3×3 convolutions with a ReLU between, [N, 8, 32, 32] → [N, 8, 32, 32]: a graph both engines run and
    torch compiles in seconds."""
    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array((rng.normal(0, 0.2, (8, 8, 3, 3))).astype(np.float32), f"w{i}") for i in (0, 1)]
    nodes = [
        helper.make_node("Conv", ["input", "w0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Conv", ["b", "w1"], ["output"], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "trial", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 8, 32, 32])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 8, 32, 32])], weights,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def model(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "models" / "trial_conv.onnx"
    path.parent.mkdir()
    onnx.save(_conv_model(), str(path))
    yield path


def _batch(count: int = 4) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(1).uniform(0, 1, (count, 8, 32, 32)).astype(np.float32)}


def _calls_until_decided(engine: TrialEngine, reference: np.ndarray, timeout: float = 300) -> int:
    """The job's calls, until the trial has timed enough of them to decide; each output checked against
    ``reference`` (whichever engine ran it). Returns how many calls it took."""
    deadline = time.monotonic() + timeout
    calls = 0
    while not engine.wait(0):
        assert time.monotonic() < deadline, "the trial did not decide"
        output = engine.run(_batch())[0]
        assert np.allclose(output, reference, atol=0.05 * float(np.abs(reference).max()))
        calls += 1
        time.sleep(0.02)
    return calls


class _Replay:
    """A contender engine that answers every call with ``outputs`` (recorded off ONNX Runtime for :func:`_batch`):
    at once, so it wins a trial, or ``seconds`` later. Its ``fails_at``-th call (the first is the trial's compile)
    raises instead."""

    input_names = ("input",)
    output_names = ("output",)

    def __init__(self, outputs: list[np.ndarray], *, seconds: float = 0.0, fails_at: int | None = None) -> None:
        self.outputs, self.seconds, self.fails_at, self.calls = outputs, seconds, fails_at, 0

    def run(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        self.calls += 1
        if self.calls == self.fails_at:
            raise RuntimeError("an Inductor kernel failed\nwith a long trace")
        if self.seconds:  # no sleep(0) when it answers at once: on a busy machine that call alone gives up the core
            time.sleep(self.seconds)
        return self.outputs

    def warmup(self) -> None:
        pass


def _on_trial(first: OnnxEngine, contender: Callable[[], Engine | str], kept: list[Trial]) -> TrialEngine:
    return TrialEngine(
        first, contender, model="trial_conv", labels=("onnxruntime fp32", "torch bf16"),
        winners=(("onnxruntime", "fp32"), ("torch", "bf16")), inputs=first.example(4) or {}, batch=4, cpu="x",
        decided=kept.append,
    )  # fmt: skip


def _loaded(engine: TrialEngine) -> LoadedModel:
    return LoadedModel(engine, None, FittedBatches(4, memory=HostMemory()), "trial_conv")


@pytest.mark.slow
def test_a_model_on_trial_runs_on_onnx_runtime_until_the_torch_engine_is_timed_then_on_the_faster(
    model: Path, tmp_path: Path
) -> None:
    settings = replica_settings(tmp_path, engine="auto", torch_compile_cache_dir=tmp_path / "cache")
    first = OnnxEngine.load(model, settings)
    reference = first.run(_batch())[0]
    gate = threading.Event()
    kept: list[Trial] = []

    def contender() -> TorchEngine:
        gate.wait()
        return TorchEngine.load(model, device="cpu", precision="bf16", mode="default", max_batch=4, memory=None,
                                safety=0.8, cache_dir=tmp_path / "cache")  # fmt: skip

    engine = TrialEngine(
        first, contender, model="trial_conv", labels=("onnxruntime fp32", "torch bf16"),
        winners=(("onnxruntime", "fp32"), ("torch", "bf16")), inputs=first.example(4) or {}, batch=4,
        cpu="a test CPU", decided=kept.append,
    )  # fmt: skip
    engine.start()
    assert engine.active is first and np.array_equal(engine.run(_batch())[0], reference), "no compile step first"
    gate.set()
    assert _calls_until_decided(engine, reference) >= 2 * ROUNDS, "the job's own calls are what is timed"
    assert kept == [engine.trial] and engine.trial is not None
    assert set(engine.trial.seconds) == {"onnxruntime fp32", "torch bf16"}
    assert all(0 < seconds < float("inf") for seconds in engine.trial.seconds.values())
    winner = {"torch": TorchEngine, "onnxruntime": OnnxEngine}[engine.trial.engine]
    assert isinstance(engine.active, winner), engine.trial.describe()
    assert np.allclose(engine.run(_batch())[0], reference, atol=0.05 * float(np.abs(reference).max()))


def test_a_contender_that_cannot_run_the_model_leaves_it_on_onnx_runtime_with_no_verdict_kept(
    model: Path, tmp_path: Path
) -> None:
    first = OnnxEngine.load(model, replica_settings(tmp_path))
    kept: list[Trial] = []
    engine = TrialEngine(
        first, lambda: "an operator the converter lacks", model="trial_conv", labels=("onnxruntime fp32", "torch bf16"),
        winners=(("onnxruntime", "fp32"), ("torch", "bf16")), inputs=first.example(2) or {}, batch=2, cpu="x",
        decided=kept.append,
    )  # fmt: skip
    engine.start()
    assert engine.wait(60) and engine.trial is None and kept == [] and engine.active is first


def _no_converter() -> str:
    return "no converter for op GridSample"


def _compile_fails() -> Engine:
    return _Replay([], fails_at=1)


@pytest.mark.parametrize(
    ("contender", "reason"),
    [(_no_converter, "(no converter for op GridSample)"), (_compile_fails, "(RuntimeError: an Inductor kernel failed")],
    ids=["cannot-convert", "compile-raises"],
)
def test_a_contender_that_cannot_run_the_model_is_reported_as_an_engine_fallback(
    model: Path, tmp_path: Path, contender: Callable[[], Engine | str], reason: str
) -> None:
    first = OnnxEngine.load(model, replica_settings(tmp_path))
    kept: list[Trial] = []
    engine = _on_trial(first, contender, kept)
    loaded = _loaded(engine)
    assert loaded.degradations() == [], "nothing is known before the trial ends"
    engine.start()
    assert engine.wait(60) and engine.trial is None and kept == [] and engine.active is first
    message = f"model trial_conv: the torch engine cannot run it {reason}"
    assert engine.fallback is not None and engine.fallback.startswith(message)
    assert engine.fallback.endswith("ONNX Runtime runs it instead (slower)")
    assert [(found.kind, found.model) for found in loaded.degradations()] == [("engine_fallback", "trial_conv")]
    assert loaded.degradations()[0].message == engine.fallback


class _Calibrating(_Replay):
    """A contender in int8 that has not yet calibrated (as the torch engine says while it meets its first items)."""

    calibrating = True


def test_a_contender_that_raises_while_it_calibrates_on_the_jobs_inputs_leaves_the_model_on_onnx_runtime(
    model: Path, tmp_path: Path
) -> None:
    first = OnnxEngine.load(model, replica_settings(tmp_path))
    reference = first.run(_batch())[0]
    contender = _Calibrating([reference], fails_at=1)
    kept: list[Trial] = []
    engine = _on_trial(first, lambda: contender, kept)
    engine.start()
    deadline = time.monotonic() + 60
    while not engine.wait(0):  # the job's calls: ONNX Runtime answers them while the contender is handed copies
        assert time.monotonic() < deadline, "the trial did not end"
        assert np.array_equal(engine.run(_batch())[0], reference)
        time.sleep(0.02)
    assert contender.calls == 1, "it was handed the job's input, and raised"
    assert engine.trial is None and kept == [] and engine.active is first
    assert engine.fallback is not None and "(RuntimeError: an Inductor kernel failed" in engine.fallback
    assert np.array_equal(engine.run(_batch())[0], reference) and contender.calls == 1


def test_a_contender_that_raises_in_a_timed_call_leaves_that_call_to_onnx_runtime_and_the_model_on_it(
    model: Path, tmp_path: Path
) -> None:
    first = OnnxEngine.load(model, replica_settings(tmp_path))
    reference = first.run(_batch())[0]
    contender = _Replay([reference], fails_at=2)  # the trial's compile, then the first timed call
    kept: list[Trial] = []
    engine = _on_trial(first, lambda: contender, kept)
    engine.start()
    outputs = []
    deadline = time.monotonic() + 60
    while not engine.wait(0):
        assert time.monotonic() < deadline, "the trial did not end"
        outputs.append(engine.run(_batch())[0])
    assert contender.calls == 2, "the failing call was the contender's timed one"
    assert all(np.array_equal(output, reference) for output in outputs), "the job's calls all answered by ORT"
    assert engine.trial is None and kept == [] and engine.active is first
    assert np.array_equal(engine.run(_batch())[0], reference) and contender.calls == 2, "no more calls of torch"
    assert engine.fallback is not None
    assert "(RuntimeError: an Inductor kernel failed with a long trace)" in engine.fallback
    assert [found.kind for found in _loaded(engine).degradations()] == ["engine_fallback"]


def test_when_the_torch_engine_wins_onnx_runtimes_session_is_released(model: Path, tmp_path: Path) -> None:
    settings = replica_settings(tmp_path)
    first = OnnxEngine.load(model, settings)
    assert OnnxEngine.load(model, settings)._session is first._session, "shared while kept"
    reference = first.run(_batch())[0]
    kept: list[Trial] = []
    engine = _on_trial(first, lambda: _Replay([reference]), kept)
    engine.start()
    assert model.resolve() in cached_models()
    _calls_until_decided(engine, reference, timeout=60)
    assert engine.trial is not None and engine.trial.engine == "torch", engine.trial
    assert isinstance(engine.active, _Replay) and kept == [engine.trial]
    assert model.resolve() not in cached_models(), "ONNX Runtime's session is not kept for the rest of the job"
    assert engine.input_names == ("input",) and engine.output_names == ("output",)
    assert engine.fallback is None and _loaded(engine).degradations() == []
    assert OnnxEngine.load(model, settings)._session is not first._session, "a later load gets a new session"


def test_onnx_runtime_winning_the_trial_is_no_fallback(model: Path, tmp_path: Path) -> None:
    first = OnnxEngine.load(model, replica_settings(tmp_path))
    reference = first.run(_batch())[0]
    kept: list[Trial] = []
    engine = _on_trial(first, lambda: _Replay([reference], seconds=0.05), kept)
    engine.start()
    _calls_until_decided(engine, reference, timeout=60)
    assert engine.trial is not None and engine.trial.engine == "onnxruntime" and engine.active is first
    assert model.resolve() in cached_models(), "the engine it stays on keeps its session"
    assert engine.fallback is None and _loaded(engine).degradations() == []


@pytest.mark.slow
@native_bf16
def test_auto_puts_a_model_on_trial_and_a_second_process_loads_the_kept_winner_without_one(
    model: Path, tmp_path: Path
) -> None:
    """The loader's whole path: the first load starts on ONNX Runtime and keeps its verdict in the compile cache;
    another process (a restarted worker) loads the winner at once, with no trial thread."""
    settings = replica_settings(tmp_path, engine="auto", torch_compile_cache_dir=tmp_path / "cache", batch_size=4)
    loaded = load_model(model, settings, name="trial_conv", batch_input="input")
    assert isinstance(loaded.engine, TrialEngine)
    _calls_until_decided(loaded.engine, OnnxEngine.load(model, settings).run(_batch())[0])
    trial = kept_trial(model, settings, "cpu", choose_engine(settings, "cpu", "trial_conv").precision)
    assert trial is not None and trial == loaded.engine.trial and trial.batch == 4
    before = loads()["trial_conv"]
    again = load_model(model, settings, name="trial_conv", batch_input="input")
    assert again is loaded and loads()["trial_conv"] == before, "the next chunk reuses this process's engines"
    script = textwrap.dedent(f"""
        import json, threading
        from pathlib import Path
        from tests.support.replicas import replica_settings
        from workers.engines.loading import load_model
        settings = replica_settings(Path({str(tmp_path)!r}), engine="auto",
                                    torch_compile_cache_dir=Path({str(tmp_path / "cache")!r}), batch_size=4)
        loaded = load_model(Path({str(model)!r}), settings, name="trial_conv", batch_input="input")
        trials = [thread.name for thread in threading.enumerate() if thread.name.startswith("swapfarm-trial")]
        print(json.dumps({{"engine": type(loaded.engine).__name__, "trials": trials}}))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    second = json.loads(done.stdout.strip().splitlines()[-1])
    assert second == {"engine": {"torch": "TorchEngine", "onnxruntime": "OnnxEngine"}[trial.engine], "trials": []}


@native_bf16
def test_a_kept_trial_decides_the_engine_and_the_doctor_says_what_was_measured(model: Path, tmp_path: Path) -> None:
    settings = replica_settings(tmp_path, engine="auto", torch_compile_cache_dir=tmp_path / "cache", batch_size=4)
    guess = choose_engine(settings, "cpu", "inswapper_128")
    assert guess.trial and (guess.engine, guess.precision) == ("torch", "int8" if probe_cpu().vnni else "bf16")
    book = TrialBook(tmp_path / "cache")
    slower = Trial("trial_conv", "onnxruntime", "fp32", {"onnxruntime fp32": 0.001, "torch bf16": 0.004}, 4,
                   probe_cpu().describe(), "2026-12-05T00:00:00+00:00")  # fmt: skip
    book.put(trial_key(model, settings, "cpu", guess.precision), slower)
    loaded = load_model(model, settings, name="trial_conv", batch_input="input")
    assert isinstance(loaded.engine, OnnxEngine), "the kept verdict, no trial and no compile"
    book.put("another-file", Trial("inswapper_128", "torch", "bf16", {"onnxruntime fp32": 0.7, "torch bf16": 0.3}, 8,
                                   probe_cpu().describe(), "2026-12-05T00:00:00+00:00"))  # fmt: skip
    rows = dict(diagnose(settings).sections["engines"])
    swapper = next(
        value
        for label, value in rows.items()
        if "inswapper_128" in label.removeprefix("face_swapper: ").split(" and ")[0].split(", ")
    )
    assert swapper.startswith("torch bf16 — auto: measured at batch 8 on 2026-12-05: onnxruntime fp32 0.7 s an item")


def _int8_trial(tmp_path: Path, model: onnx.ModelProto) -> tuple[TrialEngine, list[Trial]]:
    """A model on trial against the torch engine in int8 (the contender ``auto`` builds where the CPU has VNNI: on
    any CPU here, uncompiled to keep it cheap), run with the job's own crops (a new batch each call) until the trial
    decides."""
    path = tmp_path / "models" / f"{model.graph.name}.onnx"
    path.parent.mkdir(exist_ok=True)
    onnx.save(model, str(path))
    settings = replica_settings(tmp_path, engine="onnxruntime", torch_compile_cache_dir=tmp_path / "cache")
    first = OnnxEngine.load(path, settings)

    def contender() -> TorchEngine:
        return TorchEngine.load(path, device="cpu", precision="int8", mode="eager", max_batch=4, memory=None,
                                safety=0.5, cache_dir=tmp_path / "cache")  # fmt: skip

    kept: list[Trial] = []
    engine = TrialEngine(
        first, contender, model=model.graph.name, labels=("onnxruntime fp32", "torch int8"),
        winners=(("onnxruntime", "fp32"), ("torch", "int8")), inputs=crops(999), batch=4, cpu="x",
        decided=kept.append,
    )  # fmt: skip
    engine.start()
    deadline, seed = time.monotonic() + 600, 0
    while not engine.wait(0):
        assert time.monotonic() < deadline, "the trial did not decide"
        engine.run(crops(seed))
        seed += 1
        time.sleep(0.02)
    return engine, kept


@pytest.mark.slow
def test_an_int8_contender_calibrates_on_the_jobs_own_inputs_and_its_guard_is_in_the_verdict(tmp_path: Path) -> None:
    engine, kept = _int8_trial(tmp_path, well_quantised())
    trial = engine.trial
    assert trial is not None and kept == [trial] and set(trial.seconds) == {"onnxruntime fp32", "torch int8"}, trial
    # 32 items: the job's calls of 4 crops each, not the trial's example batch (a single call of 4)
    assert "int8 vs fp32 on 32 calibration items" in trial.note and ">= 35" in trial.note, trial.note
    assert trial.note in trial.describe()
    assert list((tmp_path / "cache" / "swapfarm-int8").glob("*.pt2")), "the quantised graph is kept for a restart"
    assert _loaded(engine).degradations() == []


@pytest.mark.slow
def test_an_int8_contender_failing_its_guard_is_timed_in_bf16_with_no_degradation(tmp_path: Path) -> None:
    engine, kept = _int8_trial(tmp_path, outlier_channel())
    trial = engine.trial
    assert trial is not None and kept == [trial] and set(trial.seconds) == {"onnxruntime fp32", "torch bf16"}, trial
    assert "failed its quality guard" in trial.note and "< 35" in trial.note, trial.note
    assert not list((tmp_path / "cache" / "swapfarm-int8").glob("*.pt2"))
    assert _loaded(engine).degradations() == [], "int8 was tried by auto, not asked for: bf16 is no fallback"
    again, _ = _int8_trial(tmp_path, outlier_channel())  # a later process: the failed guard is kept, not measured
    assert again.trial is not None and set(again.trial.seconds) == {"onnxruntime fp32", "torch bf16"}, again.trial
    assert "< 35 (measured before" in again.trial.note, again.trial.note
