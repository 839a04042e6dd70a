"""The torch engine on the CPU: faces/s of the full-size inswapper replica (≈174.6 GMAC per face) — ONNX Runtime vs
torch eager vs compiled (default, max-autotune), at batch 1 and 8, plus bf16 — and, with ``--cache-check``, how
much faster a second process warms up from the persistent compile cache than the first.

Every configuration is compiled (first call per batch size, timed as "compile s") before any is timed; the timed
rounds then alternate between configurations so the machine's noise hits all of them alike. Ratios are against
ONNX Runtime at the same batch size. The replica is written once to ``var/bench/`` and reused; compiled code is
cached in ``var/bench/torch-compile`` (so a rerun's compile column shows cache hits, not cold compiles).

    .venv/bin/python benchmarks/torch_engine_cpu.py [--batches 1 8] [--rounds 2]
    .venv/bin/python benchmarks/torch_engine_cpu.py --cache-check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.settings import CompileMode, Precision  # noqa: E402
from tests.support.replicas import inswapper_128  # noqa: E402
from workers.engines.compiling import conversion, use_compile_cache  # noqa: E402
from workers.engines.onnx_to_torch import convert  # noqa: E402
from workers.engines.torch_engine import TorchEngine  # noqa: E402

BENCH = ROOT / "var" / "bench"
MODEL = BENCH / "inswapper_128_full.onnx"
Feeds = dict[str, np.ndarray]


def model_file() -> Path:
    if not MODEL.exists():
        BENCH.mkdir(parents=True, exist_ok=True)
        print("building the full-size inswapper replica (once) …", flush=True)
        onnx.save(inswapper_128(width=1.0), str(MODEL))
    return MODEL


def feeds(batch: int) -> Feeds:
    rng = np.random.default_rng(batch)
    target = rng.uniform(-1, 1, (batch, 3, 128, 128)).astype(np.float32)
    source = (rng.normal(0, 1, (batch, 512)) * 3.9 / np.sqrt(512)).astype(np.float32)  # ‖latent‖ ≈ 3.9, as FaceFusion's
    return {"target": target, "source": source}


@dataclass
class Config:
    label: str
    run: Callable[[Feeds], np.ndarray]
    compile_seconds: dict[int, float] = field(default_factory=dict)
    seconds: dict[int, list[float]] = field(default_factory=dict)
    error: dict[int, float] = field(default_factory=dict)


def onnxruntime_config(path: Path) -> Config:
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return Config("onnxruntime (CPU EP)", lambda f: np.asarray(session.run(None, f)[0]))


def torch_config(path: Path, mode: CompileMode, precision: Precision, max_batch: int) -> Config:
    module = convert(path, **conversion(precision))
    engine = TorchEngine(module, mode=mode, precision=precision, max_batch=max_batch)
    return Config(f"torch {mode} {precision}", lambda f: engine.run(f)[0])


def benchmark(batches: list[int], rounds: int) -> None:
    path = model_file()
    use_compile_cache(BENCH / "torch-compile")
    limit = max(batches)
    configs = [
        onnxruntime_config(path),
        torch_config(path, "eager", "fp32", limit),
        torch_config(path, "default", "fp32", limit),
        torch_config(path, "max-autotune", "fp32", limit),
        torch_config(path, "default", "bf16", limit),
    ]
    reference = {batch: configs[0].run(feeds(batch)) for batch in batches}
    for config in configs:  # first calls: compiles (and cache loads) happen here
        for batch in batches:
            started = time.perf_counter()
            output = config.run(feeds(batch))
            config.compile_seconds[batch] = time.perf_counter() - started
            config.error[batch] = float(np.abs(output - reference[batch]).max())
            print(f"  {config.label:28} batch {batch}: first call {config.compile_seconds[batch]:6.1f}s", flush=True)
    for _ in range(rounds):
        for batch in batches:
            for config in configs:
                started = time.perf_counter()
                config.run(feeds(batch))
                config.seconds.setdefault(batch, []).append(time.perf_counter() - started)
    print()
    print(
        f"inswapper_128 full-size replica, CPU ({torch.get_num_threads()} threads), torch {torch.__version__}, "
        f"onnxruntime {onnxruntime.__version__}; median of {rounds} rounds"
    )
    print(f"{'engine':28} {'batch':>5} {'first call s':>12} {'faces/s':>8} {'vs ORT':>7} {'max|Δ| vs ORT':>14}")
    for batch in batches:
        base = batch / statistics.median(configs[0].seconds[batch])
        for config in configs:
            speed = batch / statistics.median(config.seconds[batch])
            first = "-" if config is configs[0] else f"{config.compile_seconds[batch]:.1f}"
            print(
                f"{config.label:28} {batch:>5} {first:>12} {speed:>8.3f} {speed / base:>6.2f}x "
                f"{config.error[batch]:>14.2e}"
            )


def warm_up_once(cache: Path) -> None:
    """In a fresh process: load and warm up the engine at batch 1 on ``cache``; print the seconds as JSON."""
    engine = TorchEngine.load(
        model_file(), device="cpu", precision="fp32", mode="default", max_batch=1, memory=None, safety=0.8,
        cache_dir=cache,
    )  # fmt: skip
    started = time.perf_counter()
    engine.warmup()
    warmup = time.perf_counter() - started
    started = time.perf_counter()
    engine.run({"target": np.zeros((1, 3, 128, 128), np.float32), "source": np.zeros((1, 512), np.float32)})
    print(json.dumps({"warmup_seconds": warmup, "run_seconds": time.perf_counter() - started}))


def cache_check() -> None:
    model_file()
    cache = BENCH / "cache-check"
    shutil.rmtree(cache, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR")}
    warmups, compiles = [], []
    for attempt in ("cold (empty cache)", "warm (second process)"):
        done = subprocess.run(
            [sys.executable, __file__, "--warm-up-once", str(cache)],
            check=True, capture_output=True, text=True, env=env, cwd=ROOT,
        )  # fmt: skip
        result = json.loads(done.stdout.strip().splitlines()[-1])
        warmups.append(result["warmup_seconds"])
        compiles.append(max(0.1, result["warmup_seconds"] - result["run_seconds"]))
        print(
            f"{attempt:24}: warm-up (compile + first run, batch 1) {warmups[-1]:6.1f}s; "
            f"a later run {result['run_seconds']:5.1f}s; compile overhead {compiles[-1]:6.1f}s",
            flush=True,
        )
    print(
        f"second process: warm-up {warmups[0] / warmups[1]:.1f}x faster, "
        f"compile overhead {compiles[0] / compiles[1]:.1f}x smaller"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache-check", action="store_true", help="cold vs warm warm-up in two fresh processes")
    parser.add_argument("--warm-up-once", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_up_once:
        warm_up_once(args.warm_up_once)
    elif args.cache_check:
        cache_check()
    else:
        benchmark(args.batches, args.rounds)


if __name__ == "__main__":
    main()
