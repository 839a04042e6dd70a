"""GPU check of the torch engine, in one command and under five minutes on one GPU; prints one table.

    .venv/bin/python benchmarks/gpu_check.py                 # on a CUDA/ROCm machine (torch with CUDA, onnxruntime-gpu)
    .venv/bin/python benchmarks/gpu_check.py --cpu-smoke     # the same code paths on the CPU, tiny models (CI)

Without a GPU (and without ``--cpu-smoke``) it refuses to run: exit status 2 and one line saying why, never
full-size models on the CPU passed off as a GPU figure. Every figure is checked before it is printed: an ONNX
Runtime session whose *active* providers fell back to the CPU is reported as such (not as CUDA), and a job that
did not succeed gets its status and error, not a frame rate.

Rows, each a measurement:

* ``throughput``: faces/s and peak memory of the full-size inswapper replica (≈174.6 GMAC per face) and of the
  enhancer replica (gfpgan layout at ``--enhancer-width``, the replica builder has no full-size GFPGAN) —
  ONNX Runtime's CUDA provider (and TensorRT's where present) vs torch eager vs ``torch.compile`` (default,
  reduce-overhead, max-autotune) — at each batch bucket of ``--buckets``, in each precision of ``--precisions``
  (fp32, fp16, bf16; the torch engine only). "first s" is the first call of that shape: the compile, cold (the
  compile cache starts empty).
* ``fit``: the per-face peak (slope of peak memory between the smallest and largest bucket, compiled default),
  the device's free memory, and the batch the engine would fit at the safety fraction.
* ``compile cache``: the same compile (swapper, default mode, bucket 8) in a second process, warm from the cache,
  against the cold first call above.
* ``e2e``: a ``face_swapper`` job on ``crowd_1080p.mp4`` through ``swapfarm run``, the farm's local run (plan,
  chunks, stitch; yunet detector, ArcFace replica, full-size inswapper replica on the torch engine, default mode,
  buckets up to ``--e2e-max-batch``): frames/s and faces/s of a first (cold: model load, warm-up) and a second (warm)
  run, each printed only when the job succeeded, with the device's busy share over the warm run (NVML, where present).
* ``stage``: the same chain run serially on ``--stage-frames`` frames, the seconds per frame of each stage
  (decode, detect, align, swap, paste, encode; upload and download are inside the swap on the host back-end).

A time budget (``--budget`` seconds) skips what would overrun, saying so in the table. Each row is printed as it
is measured (a run stopped at a time limit has printed what it measured); ``--parts`` runs some of the parts, and
``--keep`` keeps the work folder (the compile cache, the cold first calls) for parts run in a later process, as
``benchmarks/device_run.sh`` runs them, each under its own limit. Where ONNX Runtime has no CUDA provider (the
lent GPU machine's image has its CPU build) the throughput rows say so and compare compiled torch with eager torch.
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
import threading
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

from shared.media import probe  # noqa: E402
from shared.options import JobOptions  # noqa: E402
from shared.settings import CompileMode, Precision, Settings  # noqa: E402
from tests.support import replicas  # noqa: E402
from workers.engines.compiling import conversion, use_compile_cache  # noqa: E402
from workers.engines.memory import DeviceMemory, fitted_batch, memory_for  # noqa: E402
from workers.engines.onnx_to_torch import convert  # noqa: E402
from workers.engines.torch_engine import TorchEngine  # noqa: E402
from workers.local import run_local  # noqa: E402
from workers.pipeline import stages_of  # noqa: E402
from workers.processors import ProcessorContext, Work, build  # noqa: E402
from workers.video.pipes import FrameReader, FrameWriter  # noqa: E402

# The reference media and models lie beside the checkout (shared/data of the project's workspace).
DATA_CANDIDATES = (ROOT.parent / "shared" / "data", ROOT / "shared" / "data")
MODES: tuple[CompileMode, ...] = ("eager", "default", "reduce-overhead", "max-autotune")
PARTS = ("throughput", "fit", "cache", "stage", "e2e")
MODELS = ("inswapper_128", "gfpgan_1.4")
FIRST_CALLS = "first-calls.json"  # in --keep: the cold first calls of the throughput part, for the cache part
Feeds = dict[str, np.ndarray]
E2E_OPTIONS = JobOptions.model_validate({"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}})


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
        self.device = "cpu" if args.cpu_smoke else "cuda"  # main() refused to start without a GPU
        self.memory: DeviceMemory = memory_for(self.device)
        self.rows: list[Row] = []
        if args.keep:  # a folder that later parts, run in other processes, read: the compile cache, the first calls
            args.keep.mkdir(parents=True, exist_ok=True)
        self.work = args.keep or Path(tempfile.mkdtemp(prefix="swapfarm-gpu-check-"))
        self.cache = use_compile_cache(self.work / "torch-compile")
        self.peaks: dict[tuple[str, int], int] = {}
        self.first_calls: dict[tuple[str, str, int], float] = self._kept_first_calls()
        self.eager_rates: dict[tuple[str, str, int], float] = {}
        self.faces_per_frame = 0.0
        self._settings: Settings | None = None

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def _kept_first_calls(self) -> dict[tuple[str, str, int], float]:
        try:
            kept = json.loads((self.work / FIRST_CALLS).read_text())
        except (OSError, ValueError):
            return {}
        return {(name, mode, int(batch)): float(seconds) for name, mode, batch, seconds in kept}

    def _keep_first_calls(self) -> None:
        kept = [[*key, seconds] for key, seconds in self.first_calls.items()]
        (self.work / FIRST_CALLS).write_text(json.dumps(kept))

    def skip(self, kind: str, subject: str, why: str) -> None:
        self.record(Row(kind, subject, "-", note=f"skipped: {why}"))

    def record(self, row: Row) -> None:
        """Keep ``row`` for the table and print it now: a run stopped at its time limit has printed its figures."""
        if not self.rows:
            print(_line(HEADER), flush=True)
        self.rows.append(row)
        print(_line(row), flush=True)

    # throughput ------------------------------------------------------------------------------------------------

    def models(self) -> dict[str, onnx.ModelProto]:
        smoke = self.args.cpu_smoke
        makers = {
            "inswapper_128": lambda: replicas.inswapper_128() if smoke else replicas.inswapper_128(width=1.0),
            "gfpgan_1.4": lambda: (
                replicas.gfpgan_1_4() if smoke else replicas.gfpgan_1_4(width=self.args.enhancer_width)
            ),
        }
        return {name: makers[name]() for name in self.args.models}

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

    def ort_providers(self) -> list[str]:
        """The ONNX Runtime providers to measure here, best first: TensorRT and CUDA on a GPU, CPU in the smoke."""
        if self.device == "cpu":
            return ["CPUExecutionProvider"]
        available = onnxruntime.get_available_providers()
        return [p for p in ("TensorrtExecutionProvider", "CUDAExecutionProvider") if p in available]

    def ort_session(self, model: onnx.ModelProto, provider: str) -> tuple[Any, str]:
        """A session asked for ``provider`` alone, and the provider it actually runs on: ONNX Runtime falls back
        to the CPU when a provider's libraries do not load, and says so only in ``get_providers()``."""
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(model.SerializeToString(), options, providers=[provider])
        return session, session.get_providers()[0]

    def throughput(self) -> None:
        for name, model in self.models().items():
            buckets = self.args.buckets if name == "inswapper_128" else self.args.buckets[:2]
            providers = self.ort_providers()
            if not providers:
                listed = ", ".join(onnxruntime.get_available_providers())
                why = f"ONNX Runtime {onnxruntime.__version__} has no CUDA or TensorRT provider here ({listed})"
                self.skip("throughput", name, f"{why}: compiled torch is compared with eager torch")
            for provider in providers:
                session, active = self.ort_session(model, provider)
                if active != provider:
                    self.skip("throughput", name, f"ONNX Runtime {provider} fell back to {active}: not measured")
                    continue
                for batch in buckets:
                    first, seconds, _ = self.timed(partial(session.run, None), self.feeds(model, batch))
                    self.add(name, f"onnxruntime {active.removesuffix('ExecutionProvider')}", batch, first, seconds,
                             None)  # fmt: skip
                del session
            for mode in self.args.modes:  # every precision of a mode before the next mode: eager's are quick
                for precision in self.args.precisions:
                    if self.left() < 45:
                        self.skip("throughput", name, f"{mode} {precision}: out of time")
                        continue
                    self.torch_rows(name, model, buckets, mode, precision)

    def torch_rows(
        self, name: str, model: onnx.ModelProto, buckets: list[int], mode: CompileMode, precision: Precision
    ) -> None:
        engine = TorchEngine(
            convert(model, **conversion(precision)), device=self.device, mode=mode, max_batch=max(buckets),
            precision=precision,
        )  # fmt: skip
        for batch in buckets:
            try:
                first, seconds, peak = self.timed(engine.run, self.feeds(model, batch))
            except torch.OutOfMemoryError:
                self.skip("throughput", name, f"torch {mode} {precision} batch {batch}: out of device memory")
                break
            if precision == "fp32":
                self.first_calls[(name, mode, batch)] = first
                self._keep_first_calls()
                if mode == "default":
                    self.peaks[(name, batch)] = peak
            fallback = " eager fallback!" if engine.stats.eager_fallbacks else ""
            if mode == "eager":
                self.eager_rates[(name, precision, batch)] = batch / seconds
            eager = self.eager_rates.get((name, precision, batch))
            note = f"{batch / seconds / eager:.2f}x eager {precision}" if mode != "eager" and eager else ""
            self.add(name, f"torch {mode} {precision}{fallback}", batch, first, seconds, peak, note)
        del engine
        self.release()

    def add(
        self, name: str, engine: str, batch: int, first: float, seconds: float, peak: int | None, note: str = ""
    ) -> None:
        self.record(
            Row(
                "throughput",
                name,
                engine,
                str(batch),
                f"{first:.1f}",
                f"{batch / seconds:.1f} faces/s",
                "n/a" if peak is None else f"{peak / 2**20:.0f} MiB",
                note,
            )
        )

    def release(self) -> None:
        self.memory.release()
        torch._dynamo.reset()

    # fit, cache ------------------------------------------------------------------------------------------------

    def fit(self) -> None:
        for name in self.args.models:
            measured = sorted(batch for (model, batch) in self.peaks if model == name)
            if len(measured) < 2:
                self.skip("fit", name, "needs two compiled default buckets")
                continue
            low, high = measured[0], measured[-1]
            per_item = max(1, (self.peaks[(name, high)] - self.peaks[(name, low)]) // (high - low))
            free = self.memory.free_bytes()
            batch = fitted_batch(free, per_item, self.args.safety, 1024)
            self.record(
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
        if self.left() < 20:
            self.skip("compile cache", "inswapper_128", "out of time")
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR")}
        smoke = ["--cpu-smoke"] if self.args.cpu_smoke else []
        args = [sys.executable, __file__, "--warm-probe", str(self.cache), *smoke]
        try:
            done = subprocess.run(
                args, check=True, capture_output=True, text=True, env=env, cwd=ROOT, timeout=self.left()
            )
        except subprocess.TimeoutExpired:
            self.skip("compile cache", "inswapper_128", "the second process's first call did not end in the budget")
            return
        warm = json.loads(done.stdout.strip().splitlines()[-1])["first_call_seconds"]
        cold = self.first_calls[key]
        self.record(
            Row("compile cache", "inswapper_128", "torch default", "8", f"{warm:.1f}",
                note=f"second process, warm; cold {cold:.1f}s → {cold / warm:.1f}x faster")
        )  # fmt: skip

    # end to end ------------------------------------------------------------------------------------------------

    def data(self) -> Path:
        found = next((d for d in DATA_CANDIDATES if (d / "media").exists()), DATA_CANDIDATES[0])
        return Path(self.args.data or found)

    def e2e_settings(self) -> Settings:
        data = self.data()
        models = self.work / "models"
        if self._settings is not None:
            return self._settings
        models.mkdir(exist_ok=True)
        shutil.copy(data / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
        replicas.install_replica(replicas.arcface_w600k_r50(), "arcface_w600k_r50", models)
        width = replicas.REDUCED_WIDTH if self.args.cpu_smoke else 1.0
        replicas.install_replica(replicas.inswapper_128(width=width), "inswapper_128", models)
        settings = Settings(
            environment="development",
            models_dir=models,
            model_cache_dir=self.work / "model-cache",
            model_base_urls=[],
            allow_model_hash_mismatch=True,
            family="cpu" if self.device == "cpu" else "auto",
            engine="torch",
            torch_compile_mode=self.args.e2e_mode,
            torch_max_batch=self.args.e2e_max_batch,
            torch_compile_cache_dir=self.cache,
            work_dir=self.work / "work",
            batch_size=16,
        )
        self._settings = settings
        return settings

    def stages(self) -> None:
        """The chain's stages one after another on ``--stage-frames`` frames: seconds per frame of each."""
        video, source = self.data() / "media" / self.args.clip, self.data() / "media" / "s0.jpg"
        if not video.exists():
            self.skip("stage", "face_swapper", f"{video.name} is missing")
            return
        if self.left() < 30:
            self.skip("stage", "face_swapper", "out of time")
            return
        settings = self.e2e_settings()
        media = probe(video)
        context = ProcessorContext(options=E2E_OPTIONS, sources=[source], settings=settings)
        chain = stages_of([build("face_swapper", context)])
        spent: dict[str, float] = {"decode": 0.0}
        frames = faces = 0
        reader = FrameReader(
            video, seek_seconds=0, frames=self.args.stage_frames, width=media.width, height=media.height,
            batch_size=self.args.e2e_max_batch, depth=1,
        )  # fmt: skip
        writer = FrameWriter(
            self.work / "stages.mp4", width=media.width, height=media.height, fps=media.fps,
            options=E2E_OPTIONS.encoder, depth=1,
        )  # fmt: skip
        encode = 0.0
        with reader:
            batches = iter(reader)
            while True:
                started = time.perf_counter()
                batch = next(batches, None)
                spent["decode"] += time.perf_counter() - started
                if batch is None:
                    break
                if frames == 0:  # the first batch once untimed: model loads, warm-up and compiles are not a stage
                    warm = Work(batch.copy())
                    for stage in chain:
                        warm = stage(warm)
                work = Work(batch)
                for stage in chain:
                    started = time.perf_counter()
                    work = stage(work)
                    self.sync()
                    label = getattr(stage, "__name__", "stage").strip("_")
                    label = "swap" if label == "transform" else label  # the swapper's transform is its swap
                    spent[label] = spent.get(label, 0.0) + time.perf_counter() - started
                frames += len(batch)
                faces += sum(len(found) for found in work.targets or [])
                started = time.perf_counter()
                writer.write(work.frames)
                encode += time.perf_counter() - started
        started = time.perf_counter()
        writer.close()
        spent["encode"] = encode + time.perf_counter() - started
        if writer.frames_written != frames or frames == 0:
            self.skip("stage", "face_swapper", f"encoded {writer.frames_written} of {frames} frames: not measured")
            return
        self.faces_per_frame = faces / frames
        total = sum(spent.values())
        for label, seconds in spent.items():
            self.record(
                Row("stage", label, f"torch {settings.torch_compile_mode}", str(self.args.e2e_max_batch),
                    rate=f"{seconds / frames * 1000:.1f} ms/frame", note=f"{seconds / total:.0%} of the serial time")
            )  # fmt: skip
        self.record(
            Row(
                "stage",
                "upload, download",
                "-",
                note="inside the swap stage on the host back-end (crops move per batch)",
            )
        )
        self.record(Row("stage", "faces", "-", rate=f"{self.faces_per_frame:.1f} faces/frame", note=f"{frames} frames"))

    def e2e(self) -> None:
        video, source = self.data() / "media" / self.args.clip, self.data() / "media" / "s0.jpg"
        if not video.exists():
            self.skip("e2e", "face_swapper", f"{video.name} is missing")
            return
        if self.left() < 45:
            self.skip("e2e", "face_swapper", "out of time")
            return
        settings = self.e2e_settings()
        for attempt in ("cold",) if self.args.cpu_smoke else ("cold", "warm"):
            busy = BusySampler(self.device)
            started = time.perf_counter()
            with busy:
                result = run_local(
                    target=video, sources=[source], output=self.work / f"e2e-{attempt}.mp4", options=E2E_OPTIONS,
                    workers=2, settings=settings,
                )  # fmt: skip
            seconds = time.perf_counter() - started
            subject, engine = f"face_swapper {video.stem}", f"torch {self.args.e2e_mode} ({attempt})"
            if result.status != "succeeded" or not result.frames_total:
                self.record(
                    Row("e2e", subject, engine, note=f"job {result.status}: {result.error_code} {result.error_message}")
                )
                continue
            frames = result.frames_total
            faces = f", ≈{frames * self.faces_per_frame / seconds:.0f} faces/s" if self.faces_per_frame else ""
            warned = f", warnings: {', '.join(code for code, _ in result.warnings)}" if result.warnings else ""
            self.record(
                Row("e2e", subject, engine, f"≤{self.args.e2e_max_batch}", rate=f"{frames / seconds:.1f} frames/s",
                    note=f"{frames} frames in {seconds:.1f}s{faces}, device busy {busy.share()}{warned}")
            )  # fmt: skip

    def title(self) -> None:
        name = torch.cuda.get_device_name() if self.device == "cuda" else "CPU (--cpu-smoke: not a GPU figure)"
        parts = " ".join(self.args.parts)
        print(
            f"swapfarm GPU check ({parts}) — {name}, torch {torch.__version__}, onnxruntime {onnxruntime.__version__}"
        )

    def close(self) -> None:
        print(f"gpu_check: {len(self.rows)} rows in {self.args.budget - self.left():.0f}s", flush=True)


HEADER = Row("check", "model", "engine", "batch", "first s", "rate", "peak mem", "note")
WIDTHS = [15, 26, 30, 6, 8, 17, 14, 0]


def _line(row: Row) -> str:
    cells = [row.kind, row.subject, row.engine, row.batch, row.first, row.rate, row.memory, row.note]
    return " ".join(f"{cell:<{width}}" if width else cell for cell, width in zip(cells, WIDTHS, strict=True))


class BusySampler:
    """The device's busy share (NVML utilisation, sampled every 0.1 s) over a block; ``n/a`` where NVML is not
    installed or on the CPU."""

    def __init__(self, device: str) -> None:
        self.samples: list[int] = []
        self.device = device
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, name="busy-sampler", daemon=True)

    def sample(self) -> None:
        while not self.stop.wait(0.1):
            try:
                self.samples.append(int(torch.cuda.utilization()))
            except Exception:  # no NVML (pynvml) here: the share stays n/a
                return

    def __enter__(self) -> BusySampler:
        if self.device == "cuda":
            self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def share(self) -> str:
        return f"{statistics.mean(self.samples):.0f}%" if self.samples else "n/a (no NVML)"


def no_gpu_reason() -> str | None:
    """Why this machine cannot give a GPU figure, or None when torch sees a CUDA or ROCm device."""
    if torch.cuda.is_available():
        return None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA"
    return f"no GPU: torch {torch.__version__} ({build}) sees no CUDA or ROCm device; --cpu-smoke runs the CPU smoke"


def warm_probe(cache: Path, smoke: bool) -> None:
    """In a fresh process: the swapper's default-mode bucket-8 first call, from the cache in ``cache``."""
    use_compile_cache(cache)
    model = replicas.inswapper_128() if smoke else replicas.inswapper_128(width=1.0)
    device = "cpu" if smoke else "cuda"
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
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny replicas on the CPU: check the script itself")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "fp16", "bf16"], help="default fp32 bf16 fp16")
    parser.add_argument("--stage-frames", type=int, help="frames of the serial stage split (default 48)")
    parser.add_argument("--clip", help="the end-to-end clip in the data folder's media (default crowd_1080p.mp4)")
    parser.add_argument("--e2e-mode", choices=MODES, help="compile mode of the end-to-end run (default: default)")
    parser.add_argument("--budget", type=float, default=285.0, help="seconds; later checks are skipped past it")
    parser.add_argument("--buckets", type=int, nargs="+", help="default 1 8 32")
    parser.add_argument("--modes", nargs="+", choices=MODES, help="default: all")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="throughput's models")
    parser.add_argument("--enhancer-width", type=int, default=64)
    parser.add_argument("--seconds-per-point", type=float, default=1.0)
    parser.add_argument("--safety", type=float, default=0.8)
    parser.add_argument("--e2e-max-batch", type=int)
    parser.add_argument("--data", type=Path, help="folder with media/crowd_1080p.mp4 and models/yunet_2023mar.onnx")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="in this order; default: all")
    parser.add_argument("--keep", type=Path, help="work folder kept for later parts: compile cache, first calls")
    parser.add_argument("--warm-probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.warm_probe:
        warm_probe(args.warm_probe, args.cpu_smoke)
        return
    reason = None if args.cpu_smoke else no_gpu_reason()
    if reason is not None:
        print(f"gpu_check: {reason}", file=sys.stderr)
        sys.exit(2)
    # What is not given explicitly: the full check on a GPU, the least that runs every code path in the smoke.
    smoke = args.cpu_smoke
    defaults: dict[str, object] = {
        "buckets": [1, 8] if smoke else [1, 8, 32],
        "modes": ["eager", "default"] if smoke else list(MODES),
        "precisions": ["fp32"] if smoke else ["fp32", "bf16", "fp16"],
        "stage_frames": 4 if smoke else 48,
        "clip": "d18.mp4" if smoke else "crowd_1080p.mp4",
        "e2e_mode": "eager" if smoke else "default",
        "e2e_max_batch": 1 if smoke else 8,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if smoke:
        args.seconds_per_point = min(args.seconds_per_point, 0.2)
    check = Check(args)
    parts = {"throughput": check.throughput, "fit": check.fit, "cache": check.cache_check, "stage": check.stages,
             "e2e": check.e2e}  # fmt: skip
    check.title()
    try:
        for part in args.parts:
            parts[part]()
    finally:
        check.close()
        if not args.keep:
            shutil.rmtree(check.work, ignore_errors=True)


if __name__ == "__main__":
    main()
