"""Loading a heavy face model (a swapper or an enhancer) on the engine chosen for it and this worker's family.

``settings.engine`` picks the engine (``auto``: compiled torch on CUDA/ROCm, where it measures faster, and ONNX
Runtime elsewhere — on the CPU ONNX Runtime is the measured default); ``settings.model_engines`` overrides it
per model. A loaded model comes with its :class:`~workers.engines.batching.FittedBatches`: how many faces go in
one call, fitted to the device's memory and halved on out-of-memory. Models are loaded once per process.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import cast

from shared.errors import ModelError
from shared.options import AcceleratorFamily, Enhancer, Swapper
from shared.settings import CompileMode, EngineName, Precision, Settings
from workers.engines.base import Engine
from workers.engines.batching import FittedBatches
from workers.engines.family import detect_family
from workers.engines.memory import HostMemory, memory_for
from workers.engines.onnx import OnnxEngine

logger = logging.getLogger(__name__)

GPU_FAMILIES: frozenset[str] = frozenset({"cuda", "rocm"})
GPU_MAX_BATCH = 64
_LOADING = threading.Lock()  # a warm-up thread and a task asking for the same model load it once


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def choose_engine(settings: Settings, family: AcceleratorFamily, model: str) -> EngineName:
    """The engine for ``model`` on a worker of ``family``: the model's override, else ``settings.engine``, with
    ``auto`` resolved to torch on CUDA/ROCm (if torch is installed) and ONNX Runtime elsewhere."""
    wanted = settings.model_engines.get(model, settings.engine)
    if wanted != "auto":
        return wanted
    if family in GPU_FAMILIES:
        if torch_installed():
            return "torch"
        logger.warning("family %s prefers the torch engine but torch is not installed; using ONNX Runtime", family)
    return "onnxruntime"


def compile_mode(settings: Settings, family: AcceleratorFamily) -> CompileMode:
    """``settings.torch_compile_mode``, with ``auto`` as max-autotune: on CUDA/ROCm by design, and on the CPU because
    it measured at least as fast as ``default`` (full-size swapper, 2 cores: equal at batch 1, 1.30x vs 1.08x of
    ONNX Runtime at batch 8) for a similar compile time (benchmarks/torch_engine_cpu.py)."""
    if settings.torch_compile_mode != "auto":
        return settings.torch_compile_mode
    return "max-autotune"


def max_batch(settings: Settings, family: AcceleratorFamily) -> int:
    """The largest batch bucket before fitting to memory."""
    if settings.torch_max_batch is not None:
        return settings.torch_max_batch
    return GPU_MAX_BATCH if family in GPU_FAMILIES else settings.batch_size


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run: its engine, the batch its input is fixed to (if any), and its batch sizing."""

    engine: Engine
    fixed_batch: int | None
    batches: FittedBatches


def load_model(path: Path, settings: Settings, *, name: str, batch_input: str) -> LoadedModel:
    """Load model ``name`` from ``path`` on its engine (cached per process); a torch engine is warmed up here, every
    bucket compiled and the batch fitted to free memory.

    Raises:
        ModelError: the file cannot be loaded, the engine is not usable here (torch missing, no GPU for the
            family), or the converter does not support an operator of the model.
    """
    family = detect_family(settings)
    engine_name = choose_engine(settings, family, name)
    resolved = path.resolve()
    try:
        mtime_ns = resolved.stat().st_mtime_ns
    except OSError as error:
        raise ModelError(f"cannot load model {path}: {error}") from error
    if engine_name == "onnxruntime":
        engine = OnnxEngine.load(path, settings)
        batches = FittedBatches(settings.batch_size, memory=HostMemory(settings.ram_budget_bytes))
        return LoadedModel(engine, engine.fixed_batch(batch_input), batches)
    if not torch_installed():
        raise ModelError(f"model {name} is set to the torch engine but torch is not installed (extra 'torch')")
    with _LOADING:
        return _load_torch(
            str(resolved),
            mtime_ns,
            batch_input,
            family,
            settings.torch_precision,
            compile_mode(settings, family),
            max_batch(settings, family),
            settings.memory_safety_fraction,
            settings.ram_budget_bytes,
            str(settings.torch_compile_cache_dir),
        )


def warm_in_background(settings: Settings) -> threading.Thread:
    """Load and warm up ``settings.warm_models`` (swappers and enhancers, by name) on a daemon thread, so a worker
    process compiles its buckets as it starts, not in its first task; a task that needs a model meanwhile waits
    for it. Failures are logged: the task that needs the model will raise them."""

    def warm() -> None:
        from workers.faces.enhancing import ENHANCERS, FaceEnhancer
        from workers.faces.swapping import SWAPPERS, FaceSwapper

        for name in settings.warm_models:
            try:
                if name in SWAPPERS:
                    FaceSwapper.load(cast(Swapper, name), settings)
                elif name in ENHANCERS:
                    FaceEnhancer.load(cast(Enhancer, name), settings)
            except Exception:
                logger.exception("warm_models: warming %s failed", name)

    thread = threading.Thread(target=warm, name="swapfarm-warm-models", daemon=True)
    thread.start()
    return thread


@cache
def _load_torch(
    path: str,
    mtime_ns: int,
    batch_input: str,
    family: AcceleratorFamily,
    precision: Precision,
    mode: CompileMode,
    limit: int,
    safety: float,
    ram_budget_bytes: int | None,
    cache_dir: str,
) -> LoadedModel:
    from workers.engines.torch_engine import TorchEngine, device_for

    device = device_for(family)
    memory = memory_for(device, ram_budget_bytes)
    engine = TorchEngine.load(
        Path(path),
        device=device,
        precision=precision,
        mode=mode,
        max_batch=limit,
        memory=memory,
        safety=safety,
        cache_dir=Path(cache_dir),
    )
    engine.warmup()
    batches = FittedBatches(engine.max_batch, memory=memory, per_item_bytes=engine.per_item_bytes, safety=safety)
    return LoadedModel(engine, engine.fixed_batch(batch_input), batches)
