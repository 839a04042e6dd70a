"""GPU check of the torch engine, in one command and under five minutes on one GPU; prints one table.

    .venv/bin/python benchmarks/gpu_check.py                 # on a CUDA/ROCm machine (torch with CUDA, onnxruntime-gpu)
    .venv/bin/python benchmarks/gpu_check.py --smoke         # the same code paths on the CPU, tiny models (a minute)

Rows, each a measurement:

* ``throughput``: faces/s and peak memory of the full-size inswapper replica (≈174.6 GMAC per face) and of the
  enhancer replica (gfpgan layout at ``--enhancer-width``, the replica builder has no full-size GFPGAN) —
  ONNX Runtime's CUDA provider vs torch eager vs ``torch.compile`` (default, reduce-overhead, max-autotune) — at
  each batch bucket of ``--buckets``. "first s" is the first call of that shape: the compile, cold (the compile
  cache starts empty).
* ``fit``: the per-face peak (slope of peak memory between the smallest and largest bucket, compiled default),
  the device's free memory, and the batch the engine would fit at the safety fraction.
* ``compile cache``: the same compile (swapper, default mode, bucket 8) in a second process, warm from the cache,
  against the cold first call above.
* ``e2e``: a ``face_swapper`` job on ``crowd_1080p.mp4`` through the farm's embedded run (plan, chunks, stitch;
  yunet detector, ArcFace replica, full-size inswapper replica on the torch engine, default mode, buckets up to
  ``--e2e-max-batch``): frames/s of a first (cold: model load, warm-up) and a second (warm) run.

A time budget (``--budget`` seconds) skips what would overrun, saying so in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from shared.options import JobOptions  # noqa: E402
from shared.settings import CompileMode, Settings  # noqa: E402
from tests.support import replicas  # noqa: E402
from workers.embedded import run_local  # noqa: E402
from workers.engines.compiling import use_compile_cache  # noqa: E402
from workers.engines.memory import DeviceMemory, fitted_batch, memory_for  # noqa: E402
from workers.engines.onnx_to_torch import convert  # noqa: E402
from workers.engines.torch_engine import TorchEngine  # noqa: E402

# The reference media and models lie beside the checkout (shared/data of the project's workspace).
DATA_CANDIDATES = (ROOT.parent / "shared" / "data", ROOT / "shared" / "data")
MODES: tuple[CompileMode, ...] = ("eager", "default", "reduce-overhead", "max-autotune")
Feeds = dict[str, np.ndarray]


@dataclass
class Row:
    kind: str
    subject: str
    engine: str
    batch: str = ""
    first: str = ""
    rate: str = ""
    memory: str = ""
    note: str = ""


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.budget
        self.device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
        self.memory: DeviceMemory = memory_for(self.device)
        self.rows: list[Row] = []
        self.work = Path(tempfile.mkdtemp(prefix="swapfarm-gpu-check-"))
        self.cache = use_compile_cache(self.work / "torch-compile")
        self.peaks: dict[tuple[str, int], int] = {}
        self.first_calls: dict[tuple[str, str, int], float] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def skip(self, kind: str, subject: str, why: str) -> None:
        self.rows.append(Row(kind, subject, "-", note=f"skipped: {why}"))

    # throughput ------------------------------------------------------------------------------------------------

    def models(self) -> dict[str, onnx.ModelProto]:
        if self.args.smoke:
            return {"inswapper_128": replicas.inswapper_128(), "gfpgan_1.4": replicas.gfpgan_1_4()}
        return {
            "inswapper_128": replicas.inswapper_128(width=1.0),
            "gfpgan_1.4": replicas.gfpgan_1_4(width=self.args.enhancer_width),
        }

    def feeds(self, model: onnx.ModelProto, batch: int) -> Feeds:
        rng = np.random.default_rng(batch)
        out: Feeds = {}
        for value in model.graph.input:
            dims = [d.dim_value or batch for d in value.type.tensor_type.shape.dim]
            out[value.name] = rng.uniform(-1, 1, dims).astype(np.float32)
        return out

    def timed(self, run: Callable[[Feeds], object], feeds: Feeds) -> tuple[float, float, int]:
        """First-call seconds, median seconds per call after it, peak bytes over the timed calls."""
        started = time.perf_counter()
        run(feeds)
        self.sync()
        first = time.perf_counter() - started
        self.memory.reset_peak()
        base = self.memory.used_bytes()
        times: list[float] = []
        budget = time.perf_counter() + self.args.seconds_per_point
        while len(times) < 3 or (time.perf_counter() < budget and len(times) < 50):
            started = time.perf_counter()
            run(feeds)
            self.sync()
            times.append(time.perf_counter() - started)
        return first, statistics.median(times), max(0, self.memory.peak_bytes() - base)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def ort_session(self, model: onnx.ModelProto) -> Any | None:
        wanted = "CPUExecutionProvider" if self.device == "cpu" else "CUDAExecutionProvider"
        if wanted not in onnxruntime.get_available_providers():
            return None
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=[wanted])

    def throughput(self) -> None:
        for name, model in self.models().items():
            buckets = self.args.buckets if name == "inswapper_128" else self.args.buckets[:2]
            session = self.ort_session(model)
            if session is None:
                self.skip("throughput", name, "ONNX Runtime has no CUDA provider here")
            else:
                for batch in buckets:
                    first, seconds, peak = self.timed(partial(session.run, None), self.feeds(model, batch))
                    self.add(name, "onnxruntime", batch, first, seconds, None)
                del session
            for mode in self.args.modes:
                if self.left() < 45:
                    self.skip("throughput", name, f"{mode}: out of time")
                    continue
                engine = TorchEngine(convert(model), device=self.device, mode=mode, max_batch=max(buckets))
                for batch in buckets:
                    first, seconds, peak = self.timed(engine.run, self.feeds(model, batch))
                    self.first_calls[(name, mode, batch)] = first
                    if mode == "default":
                        self.peaks[(name, batch)] = peak
                    fallback = " eager fallback!" if engine.stats.eager_fallbacks else ""
                    self.add(name, f"torch {mode}{fallback}", batch, first, seconds, peak)
                del engine
                self.release()

    def add(self, name: str, engine: str, batch: int, first: float, seconds: float, peak: int | None) -> None:
        self.rows.append(
            Row(
                "throughput",
                name,
                engine,
                str(batch),
                f"{first:.1f}",
                f"{batch / seconds:.1f} faces/s",
                "n/a" if peak is None else f"{peak / 2**20:.0f} MiB",
            )
        )

    def release(self) -> None:
        self.memory.release()
        torch._dynamo.reset()

    # fit, cache ------------------------------------------------------------------------------------------------

    def fit(self) -> None:
        for name in ("inswapper_128", "gfpgan_1.4"):
            measured = sorted(batch for (model, batch) in self.peaks if model == name)
            if len(measured) < 2:
                self.skip("fit", name, "needs two compiled default buckets")
                continue
            low, high = measured[0], measured[-1]
            per_item = max(1, (self.peaks[(name, high)] - self.peaks[(name, low)]) // (high - low))
            free = self.memory.free_bytes()
            batch = fitted_batch(free, per_item, self.args.safety, 1024)
            self.rows.append(
                Row(
                    "fit", name, f"{self.memory.device}", str(batch), memory=f"{per_item / 2**20:.0f} MiB/face",
                    note=f"{free / 2**30:.1f} GiB free × {self.args.safety} safety",
                )
            )  # fmt: skip

    def cache_check(self) -> None:
        key = ("inswapper_128", "default", 8)
        if key not in self.first_calls:
            self.skip("compile cache", "inswapper_128", "no cold default-mode bucket-8 compile to compare")
            return
        if self.left() < 60:
            self.skip("compile cache", "inswapper_128", "out of time")
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR")}
        args = [sys.executable, __file__, "--warm-probe", str(self.cache)] + (["--smoke"] if self.args.smoke else [])
        done = subprocess.run(args, check=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=self.left())
        warm = json.loads(done.stdout.strip().splitlines()[-1])["first_call_seconds"]
        cold = self.first_calls[key]
        self.rows.append(
            Row("compile cache", "inswapper_128", "torch default", "8", f"{warm:.1f}",
                note=f"second process, warm; cold {cold:.1f}s → {cold / warm:.1f}x faster")
        )  # fmt: skip

    # end to end ------------------------------------------------------------------------------------------------

    def e2e(self) -> None:
        data = self.args.data or next((d for d in DATA_CANDIDATES if (d / "media").exists()), DATA_CANDIDATES[0])
        video, source = data / "media" / "crowd_1080p.mp4", data / "media" / "s0.jpg"
        if not video.exists():
            self.skip("e2e", "face_swapper", f"{video} is missing")
            return
        if self.left() < 90:
            self.skip("e2e", "face_swapper", "out of time")
            return
        models = self.work / "models"
        models.mkdir(exist_ok=True)
        shutil.copy(data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        replicas.install_replica(replicas.arcface_w600k_r50(), "arcface_w600k_r50", models)
        width = replicas.REDUCED_WIDTH if self.args.smoke else 1.0
        replicas.install_replica(replicas.inswapper_128(width=width), "inswapper_128", models)
        settings = Settings(
            environment="development",
            models_dir=models,
            model_cache_dir=self.work / "model-cache",
            model_base_urls=[],
            allow_model_hash_mismatch=True,
            family="cpu" if self.device == "cpu" else "auto",
            engine="torch",
            torch_compile_mode="default",
            torch_max_batch=self.args.e2e_max_batch,
            torch_compile_cache_dir=self.cache,
            work_dir=self.work / "work",
            batch_size=16,
        )
        options = JobOptions.model_validate({"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}})
        for attempt in ("cold", "warm"):
            started = time.perf_counter()
            result = run_local(
                target=video, sources=[source], output=self.work / f"e2e-{attempt}.mp4", options=options,
                workers=2, settings=settings,
            )  # fmt: skip
            seconds = time.perf_counter() - started
            frames = result.frames_total or 0
            self.rows.append(
                Row("e2e", "face_swapper crowd_1080p", f"torch default ({attempt})", f"≤{self.args.e2e_max_batch}",
                    rate=f"{frames / seconds:.1f} frames/s", note=f"{frames} frames in {seconds:.1f}s, {result.status}")
            )  # fmt: skip

    def print(self) -> None:
        name = torch.cuda.get_device_name() if self.device == "cuda" else "CPU (smoke)"
        print(
            f"\nswapfarm GPU check — {name}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}, "
            f"{self.args.budget - self.left():.0f}s"
        )
        header = Row("check", "model", "engine", "batch", "first s", "rate", "peak mem", "note")
        widths = [15, 26, 30, 6, 8, 17, 14, 0]
        for row in [header, *self.rows]:
            cells = [row.kind, row.subject, row.engine, row.batch, row.first, row.rate, row.memory, row.note]
            print(" ".join(f"{cell:<{width}}" if width else cell for cell, width in zip(cells, widths, strict=True)))


def warm_probe(cache: Path, smoke: bool) -> None:
    """In a fresh process: the swapper's default-mode bucket-8 first call, from the cache in ``cache``."""
    use_compile_cache(cache)
    model = replicas.inswapper_128() if smoke else replicas.inswapper_128(width=1.0)
    device = "cuda" if torch.cuda.is_available() and not smoke else "cpu"
    engine = TorchEngine(convert(model), device=device, mode="default", max_batch=8)
    feeds = {
        "target": np.zeros((8, 3, 128, 128), np.float32),
        "source": np.zeros((8, 512), np.float32),
    }
    started = time.perf_counter()
    engine.run(feeds)
    if device == "cuda":
        torch.cuda.synchronize()
    print(json.dumps({"first_call_seconds": time.perf_counter() - started}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny replicas on the CPU: check the script itself")
    parser.add_argument("--budget", type=float, default=285.0, help="seconds; later checks are skipped past it")
    parser.add_argument("--buckets", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--enhancer-width", type=int, default=64)
    parser.add_argument("--seconds-per-point", type=float, default=1.0)
    parser.add_argument("--safety", type=float, default=0.8)
    parser.add_argument("--e2e-max-batch", type=int, default=8)
    parser.add_argument("--data", type=Path, help="folder with media/crowd_1080p.mp4 and models/yunet_2023mar.onnx")
    parser.add_argument("--warm-probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_probe:
        warm_probe(args.warm_probe, args.smoke)
        return
    if args.smoke:
        args.buckets, args.modes = [1, 8], ["eager", "default", "max-autotune"]
        args.seconds_per_point, args.e2e_max_batch = min(args.seconds_per_point, 0.2), 1
    check = Check(args)
    try:
        check.throughput()
        check.fit()
        check.cache_check()
        check.e2e()
    finally:
        check.print()
        shutil.rmtree(check.work, ignore_errors=True)


if __name__ == "__main__":
    main()
