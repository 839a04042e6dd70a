"""The face-swap job on the CPU: default settings against the ONNX Runtime fp32 baseline, side by side in one run.

Every run is a fresh process running ``swapfarm run --workers 1`` on the job (the real YuNet, an ArcFace replica and
the full-size inswapper_128 replica, ≈174.6 GMAC per face): the baseline (``SWAPFARM_ENGINE=onnxruntime``, what
FaceFusion runs) and the default settings (``auto``), the latter (a) with an empty compile cache and (b) with the
cache the first run left. Printed per run: fps over the whole job (model loading and compiling included), the
ratio to the baseline of the same clip, the process's peak RSS, the time to the first output frame, the engine,
and the share of faces computed only as batch padding. Clips: the first ``--frames`` frames of d18.mp4 (one face),
the first ``--crowd-frames`` of crowd_1080p.mp4 (about five faces a frame), and d18 again with a replica written by
``torch.onnx.export`` from a module with ``ReflectionPad2d`` (tests/support/replicas.py ``exported_inswapper``).

``--memory`` compares the peak RSS of the default settings on a tenth of d18 and on all of it. ``--levers`` instead
measures what each engine setting gives the swapper alone (batch 8, the same faces, rounds
alternating between configurations): torch fp32 vs bf16, Inductor freezing, ``cpp_wrapper``, ``max-autotune``.

    .venv/bin/python -m benchmarks.face_swap_cpu [--frames 48] [--crowd-frames 8] [--data ../shared/data]
    .venv/bin/python -m benchmarks.face_swap_cpu --levers
    .venv/bin/python -m benchmarks.face_swap_cpu --int8      # the swapper alone: int8 vs bf16 vs ONNX Runtime fp32
    .venv/bin/python -m benchmarks.face_swap_cpu --memory    # peak RSS, 21 vs 216 frames of d18: flat in length
    .venv/bin/python -m benchmarks.face_swap_cpu --openvino  # the swapper alone: CPU provider vs OpenVINO fp32, bf16
    .venv/bin/python -m benchmarks.face_swap_cpu --int8-layers [--width 1.0]  # which layers int8 loses PSNR in
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "var" / "bench" / "face-swap-cpu"
DATA = ROOT.parent / "shared" / "data"


def _load() -> str:
    return os.getloadavg().__repr__()


def prepare(data: Path, frames: int, crowd_frames: int) -> dict[str, Path]:
    """Models (written once) and clips under var/bench/face-swap-cpu."""
    from tests.support.replicas import arcface_w600k_r50, exported_inswapper, install_replica, inswapper_128

    models, exported = BENCH / "models", BENCH / "models-exported"
    for folder in (models, exported):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(data / "models" / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
        install_replica(arcface_w600k_r50(), "arcface_w600k_r50", folder)
    if not (models / "inswapper_128.onnx").exists():
        print("building the full-size inswapper replica (once) …", flush=True)
        install_replica(inswapper_128(width=1.0), "inswapper_128", models)
    if not (exported / "inswapper_128.onnx").exists():
        print("exporting the full-size ReflectionPad2d replica with torch.onnx.export (once) …", flush=True)
        install_replica(exported_inswapper(width=1.0), "inswapper_128", exported)
    clips = {"d18": (data / "media" / "d18.mp4", frames), "crowd": (data / "media" / "crowd_1080p.mp4", crowd_frames)}
    paths = {"models": models, "exported": exported}
    for name, (source, count) in clips.items():
        path = BENCH / f"{name}-{count}.mp4"
        if not path.exists():
            subprocess.run(
                ["ffmpeg", "-v", "error", "-y", "-i", str(source), "-frames:v", str(count), "-c:v", "libx264",
                 "-crf", "16", "-preset", "veryfast", "-c:a", "aac", str(path)],
                check=True,
            )  # fmt: skip
        paths[name] = path
    return paths


def child(spec: dict[str, Any]) -> None:
    """One job in this (fresh) process; prints one JSON line of results."""
    import logging

    from shared.options import JobOptions
    from tests.support.replicas import replica_settings
    from workers.engines.capability import probe_cpu
    from workers.local import run_local

    logging.basicConfig(level=logging.WARNING)
    if spec.get("sequential"):  # the overlap lever, off: every stage of a batch on one thread, one batch at a time
        from workers import rendering

        def in_sequence(batches: Any, stages: Any, sink: Any, **_: Any) -> None:
            from workers.processors import Work

            fed = 0  # as run_stages numbers the frames: a batch may come as work with its faces decided
            for batch in batches:
                work = batch if isinstance(batch, Work) else Work(batch)
                if work.first is None:
                    work.first = fed
                fed = work.first + len(work.frames)
                for stage in stages:
                    work = stage(work)
                sink(work.frames)

        rendering.run_stages = in_sequence  # type: ignore[assignment]  # a benchmark's switch, not the product's
    spec["precision"] = spec["settings"].get("torch_precision", "bf16" if probe_cpu().native_bf16 else "fp32")
    settings = replica_settings(
        Path(spec["models"]),
        work_dir=Path(spec["work"]),
        heartbeat_seconds=0.5,
        torch_compile_cache_dir=Path(spec["cache"]),
        **({"engine": "auto"} | spec["settings"]),  # the default settings, unless the run says otherwise
    )
    options = JobOptions.model_validate(
        {"processors": ["face_swapper"], "face": {"swapper": "inswapper_128"}, "encoder": {"quality": 90}}
    )
    first: list[float] = []
    in_swapper = _time_swapper_calls()
    started = time.perf_counter()

    def progress(done: int, total: int | None) -> None:
        if done and not first:
            first.append(time.perf_counter() - started)

    result = run_local(
        target=Path(spec["clip"]), sources=[Path(spec["source"])], output=Path(spec["work"]) / "out.mp4",
        options=options, workers=1, settings=settings, on_progress=progress,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    assert result.status == "succeeded", result
    from workers.engines.loading import loaded_models

    engine, padded, computed = "onnxruntime fp32", 0, 0
    for loaded in loaded_models():
        trial = getattr(loaded.engine, "trial", None)
        if trial is not None and "swapper" in trial.model:  # what the swapper's trial decided, and its guard
            engine = f"{trial.engine} {trial.precision} (trial{'; ' + trial.note if trial.note else ''})"
        stats = getattr(loaded.engine, "stats", None)
        if stats is not None:
            if trial is None:
                engine = f"torch {spec['precision']}" if loaded.fallback is None else "onnxruntime (fallback)"
            padded, computed = stats.padded_items, stats.computed_items
    print(json.dumps({
        "fps": (result.frames_total or 0) / seconds, "seconds": seconds, "first_frame": first[0] if first else None,
        "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "engine": engine,
        "padding": padded / computed if computed else 0.0, "swapper_seconds": in_swapper[0],
    }))  # fmt: skip


def _time_swapper_calls() -> list[float]:
    """A benchmark's switch, not the product's: the swapper's engine calls are timed (wall, summed) into the
    returned one-element list, so a run can say how much of the job is spent outside the swapper."""
    from workers.faces.crop_model import CropModel

    spent = [0.0]
    run = CropModel._outputs

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        if type(self).__name__ != "FaceSwapper":
            return run(self, *args, **kwargs)
        begun = time.perf_counter()
        try:
            return run(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - begun

    CropModel._outputs = timed  # type: ignore[method-assign]
    return spent


def run(label: str, spec: dict[str, Any]) -> dict[str, Any]:
    work = BENCH / "work" / label.replace(" ", "-")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    spec = {**spec, "work": str(work)}
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.face_swap_cpu", "--child", json.dumps(spec)],
        cwd=ROOT, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("SWAPFARM_")},
    )  # fmt: skip
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{label}: the job failed")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"] = load
    print(f"  {label:34} {result['fps']:6.3f} fps  ({result['seconds']:.0f} s, load {load:.1f})", flush=True)
    return result


def jobs(args: argparse.Namespace) -> None:
    paths = prepare(args.data, args.frames, args.crowd_frames)
    source = str(args.data / "media" / "s0.jpg")
    caches = BENCH / "caches"
    shutil.rmtree(caches, ignore_errors=True)
    onnxruntime = {"engine": "onnxruntime"}
    table: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    plan = [
        ("d18", "models", "ONNX Runtime fp32 (baseline)", onnxruntime, "ort"),
        ("d18", "models", "default, empty compile cache", {}, "replica"),
        ("d18", "models", "default, warm compile cache", {}, "replica"),
        ("d18", "models", "default, warm, stages not overlapped", {"sequential": True}, "replica"),
        ("crowd", "models", "ONNX Runtime fp32 (baseline)", onnxruntime, "ort"),
        ("crowd", "models", "default, warm compile cache", {}, "replica"),
        ("d18", "exported", "ONNX Runtime fp32 (baseline)", onnxruntime, "ort"),
        ("d18", "exported", "default, empty compile cache", {}, "exported"),
        ("d18", "exported", "default, warm compile cache", {}, "exported"),
    ]
    wanted = set(args.runs.split(","))
    plan = [row for row in plan if (row[0] if row[1] == "models" else "exported") in wanted]
    print(f"face swap on CPU ({os.cpu_count()} cores), load average at start {os.getloadavg()[0]:.1f}", flush=True)
    baselines: dict[tuple[str, str], float] = {}
    for clip, models, label, settings, cache in plan:
        sequential = settings.pop("sequential", False) if settings is not onnxruntime else False
        spec = {"clip": str(paths[clip]), "source": source, "models": str(paths[models]),
                "cache": str(caches / cache), "settings": settings, "sequential": sequential}  # fmt: skip
        result = run(f"{clip}/{models} {label}", spec)
        if settings == onnxruntime:
            baselines[clip, models] = result["fps"]
        table.append((clip, models, {"label": label}, result))
    print()
    print(
        "| clip | model file | run | fps | × baseline | in the swapper | outside it | peak RSS | first frame | engine "
        "| padding | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for clip, models, meta, result in table:
        ratio = result["fps"] / baselines[clip, models]
        first = f"{result['first_frame']:.0f} s" if result["first_frame"] is not None else "-"
        print(
            f"| {clip} | {'torch.onnx.export' if models == 'exported' else 'replica'} | {meta['label']} | "
            f"{result['fps']:.3f} | {ratio:.2f}× | {result['swapper_seconds']:.0f} s | "
            f"{result['seconds'] - result['swapper_seconds']:.0f} s | {result['rss'] / 2**30:.2f} GiB | {first} | "
            f"{result['engine']} | {result['padding']:.0%} | {result['load']:.1f} |"
        )


def memory(args: argparse.Namespace) -> None:
    """Peak RSS of the default settings on d18's first tenth and on all of it (216 frames), warm compile cache."""
    short = max(1, 216 // 10)
    paths = prepare(args.data, short, args.crowd_frames)
    whole = prepare(args.data, 216, args.crowd_frames)["d18"]
    source = str(args.data / "media" / "s0.jpg")
    cache = str(BENCH / "caches" / "memory")
    results = {}
    for frames, clip in ((short, paths["d18"]), (short, paths["d18"]), (216, whole)):  # the first run compiles
        spec = {"clip": str(clip), "source": source, "models": str(paths["models"]), "cache": cache, "settings": {}}
        results[frames] = run(f"d18 first {frames} frames", spec)
    low, high = results[short]["rss"], results[216]["rss"]
    print(f"peak RSS: {low / 2**30:.2f} GiB ({short} frames), {high / 2**30:.2f} GiB (216 frames): {high / low:.2f}×")


def levers(rounds: int, batch: int) -> None:
    """The swapper alone, batch ``batch``: each engine setting side by side (alternating rounds)."""
    import onnxruntime
    import torch

    from tests.support.replicas import inswapper_128
    from workers.engines.compiling import conversion, use_compile_cache
    from workers.engines.onnx_to_torch import convert

    path = BENCH / "models" / "inswapper_128.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(inswapper_128(width=1.0), str(path))
    use_compile_cache(BENCH / "caches" / "levers")
    rng = np.random.default_rng(0)
    target = rng.uniform(0, 1, (batch, 3, 128, 128)).astype(np.float32)
    source = (rng.normal(0, 1, (batch, 512)) * 0.17).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    configs: dict[str, Any] = {"ONNX Runtime fp32": lambda: session.run(None, {"target": target, "source": source})}
    variants: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
        "torch fp32, compiled": (conversion("fp32"), {}),
        "torch bf16 everywhere, compiled": ({"float_dtype": torch.bfloat16}, {}),
        "torch bf16 mixed (the default), compiled": (conversion("bf16"), {}),
        "torch bf16 mixed + freezing": (conversion("bf16"), {"freezing": True}),
        "torch bf16 mixed + freezing + cpp_wrapper": (conversion("bf16"), {"freezing": True, "cpp_wrapper": True}),
        "torch bf16 mixed + freezing + max_autotune": (conversion("bf16"), {"freezing": True, "max_autotune": True}),
    }
    first: dict[str, float] = {}
    for label, (dtypes, inductor) in variants.items():
        module = convert(path, **dtypes)
        compiled = torch.compile(module, options=inductor or None, fullgraph=True, dynamic=False)
        dtype = dtypes["float_dtype"]
        tensors = (torch.from_numpy(target).to(dtype), torch.from_numpy(source).to(dtype))

        def call(compiled: Any = compiled, tensors: tuple[torch.Tensor, ...] = tensors) -> Any:
            with torch.inference_mode():
                return compiled(*tensors)

        started = time.perf_counter()
        call()
        first[label] = time.perf_counter() - started
        configs[label] = call
        print(f"  {label:40} first call (compile + run) {first[label]:6.1f} s", flush=True)
    times: dict[str, list[float]] = {label: [] for label in configs}
    for _ in range(rounds):
        for label, call in configs.items():
            started = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - started)
    base = statistics.median(times["ONNX Runtime fp32"]) / batch
    print(f"\nswapper alone, full-size replica, batch {batch}, median of {rounds} rounds, load {_load()}")
    print("| configuration | s/face | × ONNX Runtime fp32 | first call (compile) |")
    print("|---|---|---|---|")
    for label, values in times.items():
        per_face = statistics.median(values) / batch
        print(f"| {label} | {per_face:.3f} | {base / per_face:.2f}× | {first.get(label, 0):.0f} s |")


def _d18_faces() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """d18's faces of every fifth frame aligned for inswapper (RGB, [N, 3, 128, 128] in [0, 1]), and one source
    embedding of a realistic norm (through the replica's emap) for each."""
    from tests.support import replicas
    from tests.support.faces import clip_frames, detector
    from workers.faces.cropping import gather_crops
    from workers.faces.swapping import SWAPPERS

    frames = clip_frames("d18.mp4", slice(0, 216, 5))
    faces = gather_crops(frames, detector().detect(frames), SWAPPERS["inswapper_128"].model.template, 128)
    crops = np.ascontiguousarray(np.asarray(faces.crops)[..., ::-1].transpose(0, 3, 1, 2), np.float32) / 255
    latent = np.random.default_rng(0).standard_normal((1, 512)).astype(np.float32) @ replicas.realistic_emap()
    return crops, np.repeat(latent / np.linalg.norm(latent) * 3.9, len(crops), axis=0).astype(np.float32)


def int8(rounds: int, batch: int, data: Path) -> None:
    """The swapper alone at the job's batch, on d18's own aligned faces: ONNX Runtime fp32, torch bf16 and torch
    int8 (the engine's own path: calibrated on the first 32 faces, guarded, compiled with freezing), side by side;
    then the guard's figures of the other heavy replicas (ArcFace: cosine; GFPGAN: PSNR inside the face)."""
    import onnxruntime
    import torch

    from tests.support import replicas
    from workers.engines.compiling import compile_quantised, conversion, use_compile_cache
    from workers.engines.onnx_to_torch import convert
    from workers.engines.quantising import Int8Plan, QuantisedGraphs, guard, model_hash, quantise
    from workers.engines.torch_engine import TorchEngine

    path = BENCH / "models" / "inswapper_128.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(replicas.inswapper_128(width=1.0), str(path))
    cache = BENCH / "caches" / "int8"
    shutil.rmtree(cache, ignore_errors=True)
    use_compile_cache(cache)
    crops, latent = _d18_faces()
    print(f"{len(crops)} faces of d18; batch {batch}; load {_load()}", flush=True)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    plan = Int8Plan(QuantisedGraphs(cache), QuantisedGraphs.key(model_hash(path), "cpu"),
                    lambda: convert(path, **conversion("bf16")))  # fmt: skip
    engines = {
        "torch bf16 mixed (compiled)": TorchEngine(
            convert(path, **conversion("bf16")), precision="bf16", max_batch=batch
        ),
        "torch int8 PT2E (compiled, freezing)": TorchEngine(
            convert(path), precision="int8", max_batch=batch, int8=plan
        ),
    }
    timed = crops[:batch], latent[:batch]
    calls: dict[str, Any] = {"ONNX Runtime fp32": lambda: session.run(None, {"target": timed[0], "source": timed[1]})}
    first: dict[str, float] = {}
    for label, engine in engines.items():
        started = time.perf_counter()
        for start in range(0, 32, batch):  # int8: the 32 faces it calibrates on; bf16: the same calls
            engine.run({"target": crops[start : start + batch], "source": latent[start : start + batch]})
        engine.run({"target": timed[0], "source": timed[1]})  # compiles
        first[label] = time.perf_counter() - started
        if engine.stats.precision_fallback:  # the guard failed: this row times bf16, and says so
            label = f"{label} -> {engine.precision} (guard failed)"
            first[label] = first.pop(label.split(" -> ")[0])
        print(f"  {label:40} calibrate + compile + first calls {first[label]:6.1f} s  {engine.stats.guard or ''}")
        calls[label] = lambda engine=engine: engine.run({"target": timed[0], "source": timed[1]})
    if engines["torch int8 PT2E (compiled, freezing)"].stats.precision_fallback:
        # what int8 would give if the guard passed (a model with trained weights may): the same recipe on the same
        # 32 faces, compiled the same way, timed only; its outputs are no job's
        label = "torch int8 PT2E, unguarded (speed only)"
        started = time.perf_counter()
        calibration = [(torch.from_numpy(crops[s : s + batch]), torch.from_numpy(latent[s : s + batch]))
                       for s in range(0, 32, batch)]  # fmt: skip
        graph = quantise(convert(path), calibration, [True, True])
        compiled = compile_quantised(graph, "default")
        arguments = (torch.from_numpy(timed[0]), torch.from_numpy(timed[1]))

        def unguarded() -> Any:
            with torch.inference_mode():
                return compiled(*arguments)

        unguarded()  # compiles
        first[label] = time.perf_counter() - started
        print(f"  {label:40} quantise + compile + first call {first[label]:6.1f} s")
        calls[label] = unguarded
    times: dict[str, list[float]] = {label: [] for label in calls}
    for _ in range(rounds):
        for label, call in calls.items():
            started = time.perf_counter()
            call()
            times[label].append(time.perf_counter() - started)
    reference = session.run(None, {"target": crops, "source": latent})[0]
    last = engines["torch int8 PT2E (compiled, freezing)"]
    int8_out = last.run({"target": crops, "source": latent})[0]
    held = guard([(torch.from_numpy(reference),)], [(torch.from_numpy(int8_out),)])
    base = statistics.median(times["ONNX Runtime fp32"]) / batch
    print(f"\nswapper alone, full-size replica, batch {batch}, median of {rounds} rounds, load {_load()}")
    print(f"the int8 engine ({last.precision} in force) vs ONNX Runtime fp32 on all {len(crops)} faces: "
          f"{held.describe()}")  # fmt: skip
    print("| configuration | s/face | × ONNX Runtime fp32 | first calls |")
    print("|---|---|---|---|")
    for label, values in times.items():
        per_face = statistics.median(values) / batch
        print(f"| {label} | {per_face:.3f} | {base / per_face:.2f}× | {first.get(label, 0):.0f} s |")
    print("\nguard on the other heavy replicas (reduced widths, 32 d18-shaped inputs):")
    for name, model, size in (("arcface_w600k_r50", replicas.arcface_w600k_r50(), 112),
                              ("gfpgan_1.4", replicas.gfpgan_1_4(), 512)):  # fmt: skip
        module = convert(model)
        inputs = [(torch.from_numpy(np.asarray(
            torch.nn.functional.interpolate(torch.from_numpy(crops[i : i + 8]), size=size, mode="bilinear")) * 2 - 1),)
            for i in range(0, 32, 8)]  # fmt: skip
        with torch.inference_mode():
            reference_outputs = [tuple(module(*call)) for call in inputs]
        try:
            graph = quantise(module, inputs, [True])
        except Exception as error:  # the engine falls back to bf16 on this too
            print(f"  {name}: cannot be quantised: {type(error).__name__}: {error}")
            continue
        with torch.inference_mode():
            print(f"  {name}: {guard(reference_outputs, [tuple(graph(*call)) for call in inputs]).describe()}")


OPENVINO_RUNS = {  # label: (family, openvino_precision)
    "CPU provider fp32": ("cpu", "fp32"),
    "OpenVINO fp32 hint": ("openvino", "fp32"),
    "OpenVINO bf16 hint": ("openvino", "bf16"),
}


def _as_tuple(outputs: Any) -> tuple[Any, ...]:
    return tuple(outputs) if isinstance(outputs, tuple | list) else (outputs,)


def int8_layers(width: float) -> None:
    """Which of the swapper replica's layers lose the int8 guard's PSNR: the engine's PT2E recipe on 32 of d18's
    aligned faces, with every convolution but a chosen group (or one) left in fp32, each held to fp32 by the guard
    (eager; no timing). The groups follow inswapper's layout: convolutions 0-3 the encoder (0 reads the image), 4-15
    the six style blocks (two each), 16-19 the decoder (19 writes the image); the 12 linears make the style vectors."""
    import torch
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    from tests.support import replicas
    from workers.engines import quantising
    from workers.engines.onnx_to_torch import convert

    path = BENCH / "models" / f"inswapper_128-width-{width:g}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(replicas.inswapper_128(width=width), str(path))
    crops, latent = _d18_faces()
    module = convert(path).eval()
    calls = [(torch.from_numpy(crops[i : i + 8]), torch.from_numpy(latent[i : i + 8])) for i in range(0, 32, 8)]
    with torch.no_grad():
        reference = [_as_tuple(module(*call)) for call in calls]
    prepare_pt2e, convert_pt2e, _, source = quantising._pt2e()
    aten = torch.ops.aten

    def psnr_with_int8(convs: set[int], linears: bool) -> float:
        class Chosen(x86.X86InductorQuantizer):  # type: ignore[misc]  # untyped
            def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
                annotated: torch.fx.GraphModule = super().annotate(model)
                nodes = annotated.graph.nodes
                for index, node in enumerate(n for n in nodes if n.target is aten.conv2d.default):
                    if index not in convs:
                        node.meta.pop("quantization_annotation", None)
                for node in (n for n in nodes if n.target is aten.linear.default and not linears):
                    node.meta.pop("quantization_annotation", None)
                return annotated

        quantizer = Chosen()
        quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
        graph = quantising.export(module, calls[0], [True, True], strict=True).module()
        prepared = prepare_pt2e(quantising._without_noop_casts(graph), quantizer)
        with torch.no_grad():
            for call in calls:
                prepared(*call)
            quantised = convert_pt2e(prepared)
            outputs = [_as_tuple(quantised(*call)) for call in calls]
        return quantising.guard(reference, outputs).figure

    print(f"inswapper_128 replica, width {width:g}; 32 of d18's faces; {source}; int8 vs fp32 inside the face")
    rows = {
        "every layer but the first and last convolutions (the engine's recipe)": (set(range(1, 19)), True),
        "the same, linears in fp32": (set(range(1, 19)), False),
        "encoder convolutions 1-3 only": ({1, 2, 3}, False),
        "style-block convolutions 4-15 only": (set(range(4, 16)), False),
        "decoder convolutions 16-18 only": ({16, 17, 18}, False),
        **{f"convolution {k} only": ({k}, False) for k in (1, 4, 5, 10, 15, 17)},
    }
    for label, (convs, linears) in rows.items():
        print(f"  {label:72s} {psnr_with_int8(convs, linears):6.2f} dB", flush=True)


def provider_child(spec: dict[str, Any]) -> None:
    """The swapper alone in this (fresh) process, through the engine's own loading (``OnnxEngine.load``: providers
    and their options as a worker of the family chooses them); prints one JSON line, saves every output."""
    import onnxruntime

    from shared.settings import Settings
    from workers.engines.onnx import OnnxEngine

    family, precision = OPENVINO_RUNS[spec["label"]]
    settings = Settings(environment="test", family=family, openvino_precision=precision)
    started = time.perf_counter()
    engine = OnnxEngine.load(Path(spec["model"]), settings)
    loaded = time.perf_counter() - started
    faces = np.load(spec["faces"])
    crops, latent, batch = faces["crops"], faces["latent"], spec["batch"]
    timed = {"target": crops[:batch], "source": latent[:batch]}
    engine.run(timed)  # the first call (OpenVINO compiles for the shape)
    times = []
    for _ in range(spec["rounds"]):
        started = time.perf_counter()
        engine.run(timed)
        times.append(time.perf_counter() - started)
    outputs = [engine.run({"target": crops[i : i + batch], "source": latent[i : i + batch]})[0]
               for i in range(0, len(crops), batch)]  # fmt: skip
    np.save(spec["out"], np.concatenate(outputs))
    runtime = f"{onnxruntime.__version__} ({', '.join(onnxruntime.get_available_providers())})"
    print(json.dumps({"per_face": statistics.median(times) / batch, "load": loaded, "providers": engine.providers,
                      "onnxruntime": runtime}))  # fmt: skip


def openvino(rounds: int, batch: int, python: Path) -> None:
    """The swapper alone (full-size replica) at the job's batch on d18's aligned faces: ONNX Runtime's CPU provider
    in fp32 (this venv) against its OpenVINO provider with the fp32 and the bf16 precision hint (``python``: a venv
    with onnxruntime-openvino, ``scripts/setup --venv .venv-openvino openvino``), each a fresh process, one after
    the other; every output against the CPU provider's (PSNR over all faces, outputs in [0, 1])."""
    from tests.support import replicas

    if not python.exists():
        raise SystemExit(f"{python} is missing: scripts/setup --venv .venv-openvino openvino")
    model = BENCH / "models" / "inswapper_128.onnx"
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(replicas.inswapper_128(width=1.0), str(model))
    crops, latent = _d18_faces()
    folder = BENCH / "openvino"
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "faces.npz", crops=crops, latent=latent)
    print(f"{len(crops)} faces of d18; batch {batch}; load {_load()}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for label, (family, _) in OPENVINO_RUNS.items():
        spec = {"label": label, "model": str(model), "faces": str(folder / "faces.npz"), "batch": batch,
                "rounds": rounds, "out": str(folder / f"{family}-{label.split()[1]}.npy")}  # fmt: skip
        done = subprocess.run(
            [str(python) if family == "openvino" else sys.executable, "-m", "benchmarks.face_swap_cpu",
             "--provider-child", json.dumps(spec)],
            cwd=ROOT, capture_output=True, text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("SWAPFARM_")},
        )  # fmt: skip
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"{label}: failed")
        results[label] = json.loads(done.stdout.strip().splitlines()[-1]) | {"out": spec["out"]}
        print(f"  {label:20} {results[label]['per_face']:.3f} s/face  {results[label]}", flush=True)
    reference = np.load(results["CPU provider fp32"]["out"])
    base = results["CPU provider fp32"]["per_face"]
    print(f"\nswapper alone, full-size replica, batch {batch}, median of {rounds} rounds, load {_load()}")
    print("| configuration | providers | s/face | × CPU provider | PSNR vs CPU provider | session load |")
    print("|---|---|---|---|---|---|")
    for label, result in results.items():
        output = np.load(result["out"])
        mse = float(np.mean((output.astype(np.float64) - reference) ** 2))
        quality = "identical" if mse == 0 else f"{10 * np.log10(1 / mse):.1f} dB"
        print(f"| {label} | {', '.join(result['providers'])} | {result['per_face']:.3f} | "
              f"{base / result['per_face']:.2f}× | {quality} | {result['load']:.1f} s |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=48, help="first frames of d18.mp4")
    parser.add_argument("--crowd-frames", type=int, default=8, help="first frames of crowd_1080p.mp4")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--runs", default="d18,crowd,exported", help="which of the job runs: d18, crowd, exported")
    parser.add_argument("--levers", action="store_true", help="the swapper alone under each engine setting")
    parser.add_argument("--memory", action="store_true", help="peak RSS on d18's first tenth vs all of it")
    parser.add_argument("--int8", action="store_true", help="the swapper alone: int8 vs bf16 vs ONNX Runtime fp32")
    parser.add_argument("--openvino", action="store_true", help="the swapper alone: CPU provider vs OpenVINO fp32/bf16")
    parser.add_argument("--int8-layers", action="store_true", help="which swapper layers int8 loses PSNR in")
    parser.add_argument("--width", type=float, default=1 / 32, help="--int8-layers: the replica's width (1: full size)")
    parser.add_argument("--openvino-python", type=Path, default=ROOT / ".venv-openvino" / "bin" / "python")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--provider-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        child(json.loads(args.child))
    elif args.provider_child:
        provider_child(json.loads(args.provider_child))
    elif args.openvino:
        openvino(args.rounds, 8, args.openvino_python)
    elif args.levers:
        levers(args.rounds, 8)
    elif args.memory:
        memory(args)
    elif args.int8:
        int8(args.rounds, 8, args.data)
    elif args.int8_layers:
        int8_layers(args.width)
    else:
        jobs(args)


if __name__ == "__main__":
    main()
