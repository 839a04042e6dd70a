"""The torch engine's int8 precision: PT2E quantisation calibrated on the first inputs, the quality guard both ways,
the quantised graph kept for the next process, and ``auto``'s choice per CPU capability.

The replicas are small (64² crops, 8 channels, tests/support/quant_replicas.py) so that exporting, calibrating and
compiling them is cheap; the full-size swapper is measured in benchmarks/face_swap_cpu.py only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import pytest

from shared.settings import Settings
from tests.support.quant_replicas import SIZE, crops, outlier_channel, well_quantised
from workers.engines.batching import FittedBatches
from workers.engines.capability import CpuCapability
from workers.engines.choosing import choose_engine
from workers.engines.compiling import conversion
from workers.engines.loading import LoadedModel
from workers.engines.onnx_to_torch import convert
from workers.engines.quantising import EARLY_ITEMS, MIN_PSNR, Int8Plan, QuantisedGraphs, face_ellipse, model_hash
from workers.engines.torch_engine import TorchEngine

Array = npt.NDArray[Any]
ITEMS = 8
"""Items calibrated on in these tests (the engine's default is 32)."""


def _psnr_in_face(want: Array, got: Array) -> float:
    mask = face_ellipse(SIZE, SIZE)
    error = float(np.mean(((want - got) ** 2)[..., mask]))
    peak = float(want.max() - want.min())
    return float("inf") if error == 0 else 10 * np.log10(peak**2 / error)


def _int8_engine(
    model: onnx.ModelProto, folder: Path, mode: Any = "eager", items: int = ITEMS
) -> tuple[TorchEngine, Path]:
    path = folder / f"{model.graph.name}.onnx"
    if not path.exists():
        onnx.save(model, str(path))
    plan = Int8Plan(
        QuantisedGraphs(folder / "cache"),
        QuantisedGraphs.key(model_hash(path), "cpu"),
        lambda: convert(path, **conversion("bf16")),
        items=items,
    )
    return TorchEngine(convert(path), precision="int8", mode=mode, max_batch=4, int8=plan), path


def _fp32(path: Path, feeds: dict[str, Array]) -> Array:
    engine = TorchEngine(convert(path), mode="eager", max_batch=4)
    return engine.run(feeds)[0]


@pytest.mark.slow
def test_a_model_that_quantises_well_runs_compiled_int8_within_35_db_of_fp32(tmp_path: Path) -> None:
    engine, path = _int8_engine(well_quantised(), tmp_path, mode="default")
    calibration = [crops(seed) for seed in range(ITEMS // 4)]
    first = [engine.run(feeds)[0] for feeds in calibration]
    assert engine.stats.int8 == "calibrated" and engine.stats.calibrated_items == ITEMS
    assert engine.precision == "int8" and not engine.stats.precision_fallback
    assert engine.stats.guard is not None and ">= 35" in engine.stats.guard
    # the calibration calls' outputs are fp32's own (the guard's reference), so the job's first faces are exact
    assert all(np.array_equal(a, _fp32(path, feeds)) for a, feeds in zip(first, calibration, strict=True))
    fresh = crops(seed=100)
    got = engine.run(fresh)[0]
    assert engine.stats.compiles == 1 and engine.mode == "default"  # the int8 graph compiled (with freezing)
    assert _psnr_in_face(_fp32(path, fresh), got) >= MIN_PSNR
    assert not np.array_equal(got, _fp32(path, fresh))  # int8 indeed, not fp32 again
    loaded = LoadedModel(engine, None, FittedBatches(4), name="int8_friendly")
    assert loaded.degradations() == []


def test_a_model_with_an_outlier_channel_fails_the_guard_and_runs_bf16_as_a_visible_degradation(
    tmp_path: Path,
) -> None:
    engine, path = _int8_engine(outlier_channel(), tmp_path)
    engine.warmup()  # as a worker starts: an int8 engine calibrates on the job's first items, not on zeros
    assert engine.calibrating and engine.stats.calibrated_items == 0 and not engine.stats.warmed_buckets
    for seed in range(ITEMS // 4):
        engine.run(crops(seed))
    assert engine.precision == "bf16" and engine.stats.int8 is None
    assert engine.stats.guard is not None and "< 35" in engine.stats.guard
    (degradation,) = LoadedModel(engine, None, FittedBatches(4), name="outlier").degradations()
    assert degradation.kind == "precision_fallback" and "bf16" in degradation.message
    fresh = crops(seed=100)
    assert _psnr_in_face(_fp32(path, fresh), engine.run(fresh)[0]) >= MIN_PSNR  # bf16 keeps the faces
    # the verdict is kept: a restarted worker goes to bf16 at once, without calibrating again
    again, _ = _int8_engine(outlier_channel(), tmp_path)
    assert again.precision == "bf16" and not again.calibrating and again.stats.calibrated_items == 0


def test_a_model_far_below_the_guard_on_its_first_items_stops_calibrating_there(tmp_path: Path) -> None:
    """With the engine's 32 items, the early check on the first 8 ends the outlier's calibration (9.8 dB is far
    below 35); a model that quantises well calibrates on."""
    outlier, _ = _int8_engine(outlier_channel(), tmp_path, items=32)
    well, _ = _int8_engine(well_quantised(), tmp_path, items=32)
    for seed in range(EARLY_ITEMS // 4):
        outlier.run(crops(seed))
        well.run(crops(seed))
    assert outlier.precision == "bf16" and outlier.stats.calibrated_items == EARLY_ITEMS
    assert outlier.stats.guard is not None and "< 35" in outlier.stats.guard
    assert well.calibrating and well.stats.calibrated_items == EARLY_ITEMS and well.stats.guard is None


_CHILD = """
import json, sys
from pathlib import Path
import numpy as np
from tests.support.quant_replicas import SIZE
from workers.engines.torch_engine import TorchEngine
path, cache, seeds = Path(sys.argv[1]), Path(sys.argv[2]), range(int(sys.argv[3]))
engine = TorchEngine.load(path, device="cpu", precision="int8", mode="eager", max_batch=8, memory=None,
                          safety=0.8, cache_dir=cache)
rng = np.random.default_rng(7)
feeds = {"target": rng.uniform(-1, 1, (8, 3, SIZE, SIZE)).astype(np.float32),
         "source": rng.standard_normal((8, 512)).astype(np.float32)}
for _ in seeds:
    engine.run(feeds)
out = engine.run(feeds)[0]
print(json.dumps({"int8": engine.stats.int8, "calibrated": engine.stats.calibrated_items,
                  "precision": engine.precision, "output": out[:, :, ::8, ::8].tolist()}))
"""


def _child(path: Path, cache: Path, calls: int) -> dict[str, Any]:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(cache), str(calls)],
        capture_output=True, text=True, timeout=600, env=env, cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.slow
def test_a_second_process_loads_the_quantised_graph_without_calibrating(tmp_path: Path) -> None:
    path = tmp_path / "int8_friendly.onnx"
    onnx.save(well_quantised(), str(path))
    cache = tmp_path / "compile-cache"
    first = _child(path, cache, calls=4)  # 4 calls of 8: the engine's 32 items
    assert first["int8"] == "calibrated" and first["calibrated"] == 32 and first["precision"] == "int8"
    assert list((cache / QuantisedGraphs.FOLDER).glob("*.pt2"))
    second = _child(path, cache, calls=0)
    assert second["int8"] == "cache" and second["calibrated"] == 0 and second["precision"] == "int8"
    np.testing.assert_allclose(np.array(second["output"]), np.array(first["output"]), atol=1e-5)


NATIVE = CpuCapability("AVX512", avx512_bf16=True, vnni=True)
BF16_ONLY = CpuCapability("AVX512", avx512_bf16=True)
VNNI_ONLY = CpuCapability("AVX512", vnni=True)
PLAIN = CpuCapability("AVX2")


@pytest.mark.parametrize(
    ("capability", "family", "overrides", "engine", "precision", "trial"),
    [
        (NATIVE, "cpu", {}, "torch", "int8", True),
        (NATIVE, "cpu", {"torch_precision": "int8"}, "torch", "int8", False),
        (VNNI_ONLY, "cpu", {}, "onnxruntime", "fp32", False),
        (VNNI_ONLY, "cpu", {"torch_precision": "int8"}, "torch", "int8", False),
        (BF16_ONLY, "cpu", {}, "torch", "bf16", True),
        (PLAIN, "cpu", {}, "onnxruntime", "fp32", False),
        (NATIVE, "cpu", {"torch_precision": "bf16"}, "torch", "bf16", True),
        (NATIVE, "cpu", {"torch_precision": "fp32"}, "onnxruntime", "fp32", False),
        (NATIVE, "openvino", {}, "onnxruntime", "fp32", False),
        (NATIVE, "cpu", {"model_engines": {"inswapper_128": "onnxruntime"}}, "onnxruntime", "fp32", False),
    ],
)
def test_auto_times_int8_where_the_cpu_has_vnni_and_bf16_where_native_and_int8_set_runs_untimed(
    capability: CpuCapability, family: Any, overrides: dict[str, Any], engine: str, precision: str, trial: bool
) -> None:
    settings = Settings(environment="test", engine="auto", family=family, **overrides)
    choice = choose_engine(settings, family, "inswapper_128", cpu=lambda: capability)
    assert (choice.engine, choice.precision, choice.trial) == (engine, precision, trial), choice.reason
    assert choice.reason
