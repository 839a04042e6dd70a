"""Loading a heavy face model (a swapper or an enhancer) on the engine chosen for it and this worker's family.

``settings.engine`` picks the engine, ``settings.model_engines`` overrides it per model; ``auto`` picks per machine
(:func:`workers.engines.choosing.choose_engine`). On a CPU that computes bf16 natively, a model is put on trial
(:mod:`workers.engines.trials`): it starts on ONNX Runtime and is timed against the compiled torch engine (in int8
where the CPU has VNNI, held to fp32 by its guard and in bf16 where it fails: :mod:`workers.engines.quantising`),
the faster kept. A model the torch converter cannot take runs on ONNX Runtime instead, with a
:class:`~workers.engines.base.Degradation` the render step reports; it never fails the job.

A loaded model comes with its :class:`~workers.engines.batching.FittedBatches`: how many faces go in one call,
fitted to the device's memory and halved on out-of-memory. Models are loaded once per process and shared by every
chunk and job (:func:`loads` counts the loads).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from shared.errors import ModelError
from shared.families import FAMILIES, AcceleratorFamily
from shared.settings import CompileMode, Precision, Settings
from workers.engines.base import Degradation, Engine
from workers.engines.batching import FittedBatches
from workers.engines.capability import CpuProbe, probe_cpu
from workers.engines.choosing import EngineChoice, choose_engine, compile_mode, max_batch, torch_installed
from workers.engines.family import detect_family
from workers.engines.memory import DeviceMemory, HostMemory, memory_for
from workers.engines.onnx import OnnxEngine, release_sessions
from workers.engines.trials import Trial, TrialBook, TrialEngine
from workers.models.download import sha256_of
from workers.models.registry import ModelKind

if TYPE_CHECKING:
    from workers.engines.torch_engine import TorchEngine

logger = logging.getLogger(__name__)

ONNX_RUNTIME_KINDS: frozenset[ModelKind] = frozenset({"detector", "recognizer", "embedding_converter"})
"""The kinds of model loaded straight onto ONNX Runtime, never through :func:`load_model` (no engine is chosen for
them): the detectors (:mod:`workers.faces.detection`; the device path converts them itself), the recogniser
(:mod:`workers.faces.recognition`) and the swappers' embedding converters (:mod:`workers.faces.swapping`)."""
_LOADING = threading.Lock()  # a warm-up thread and a task asking for the same model load it once


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run: its engine, the batch its input is fixed to (if any), its batch sizing, and — when
    it runs on another engine than the one chosen for it — why (``fallback``; for a model on trial, its
    :class:`~workers.engines.trials.TrialEngine`'s, known once the torch engine failed)."""

    engine: Engine
    fixed_batch: int | None
    batches: FittedBatches
    name: str = ""
    fallback: str | None = field(default=None)

    def degradations(self) -> list[Degradation]:
        """The slower paths this model is on now: ONNX Runtime instead of the torch engine, eager instead of
        compiled (known once compiling failed), bf16 instead of int8 (known once it calibrated)."""
        found = []
        fallback = self.fallback or getattr(self.engine, "fallback", None)
        if fallback:
            found.append(Degradation("engine_fallback", self.name, fallback))
        stats = getattr(self.engine, "stats", None)
        reason = getattr(stats, "fallback_reason", None)
        if reason:
            message = f"model {self.name}: torch.compile failed, so it runs uncompiled (slower): {reason}"
            found.append(Degradation("eager_fallback", self.name, message.splitlines()[0][:500]))
        precision = getattr(stats, "precision_fallback", None)
        if precision:
            found.append(Degradation("precision_fallback", self.name, f"model {self.name}: {precision}"[:500]))
        return found


_LOADS: Counter[str] = Counter()
_ONNX_MODELS: dict[tuple[object, ...], LoadedModel] = {}  # this process's models on ONNX Runtime (torch's: _load_torch)


_LOADED: list[LoadedModel] = []


def loads() -> Mapping[str, int]:
    """How many times each model file was loaded (read and converted, or given a session) in this process: once
    each, however many chunks and jobs use it."""
    return dict(_LOADS)


def loaded_models() -> list[LoadedModel]:
    """The heavy models this process has loaded, in order (their engines' counters tell compiles and padding)."""
    return list(_LOADED)


def release_models() -> None:
    """Forget every model this process has loaded, and its ONNX Runtime sessions: their memory goes once nothing else
    holds them, and the next use loads them again. A worker keeps its models for its life; a process that runs
    unrelated work one part after another (the test suite: a module at a time) releases them between parts."""
    with _LOADING:
        _ONNX_MODELS.clear()
        _LOADED.clear()
        _load_torch.cache_clear()
    release_sessions()


def load_model(path: Path, settings: Settings, *, name: str, batch_input: str) -> LoadedModel:
    """Load model ``name`` from ``path`` on its engine, once per process (later calls return the same model).

    A torch engine compiles lazily, each batch size when a batch of it first runs, and fits its batch to free
    memory from the per-item memory measured then (kept beside the compile cache for the next process). A
    model the torch engine cannot take (an operator the converter lacks, no usable device) runs on ONNX Runtime,
    with ``fallback`` saying why.

    Raises:
        ModelError: the file cannot be loaded by any engine, or the torch engine is chosen and torch is missing.
    """
    family = detect_family(settings)
    choice = choose_engine(settings, family, name)
    resolved = path.resolve()
    try:
        mtime_ns = resolved.stat().st_mtime_ns
    except OSError as error:
        raise ModelError(f"cannot load model {path}: {error}") from error
    if choice.trial:
        on_trial = _ONNX_MODELS.get(_on_trial_key(resolved, mtime_ns, name, batch_input, choice.precision))
        if on_trial is not None:  # this process's trial, decided or not: the next chunk uses the same engines
            return on_trial
        kept = kept_trial(resolved, settings, family, choice.precision)
        if kept is None:
            return _load_on_trial(resolved, mtime_ns, settings, family, name, batch_input, choice.precision)
        choice = _decided_by(kept)
        logger.info("model %s on %s %s: %s", name, kept.engine, kept.precision, kept.describe())
    if choice.engine == "torch":
        if not torch_installed():
            raise ModelError(f"model {name} is set to the torch engine but torch is not installed (extra 'torch')")
        with _LOADING:
            loaded = _load_torch(
                str(resolved), mtime_ns, name, batch_input, TorchRecipe.of(settings, family, choice.precision)
            )
        if isinstance(loaded, LoadedModel):
            return loaded
        fallback = f"model {name}: the torch engine cannot run it ({loaded}); ONNX Runtime runs it instead (slower)"
    else:
        fallback = None
    key = (str(resolved), mtime_ns, name, batch_input, tuple(settings.execution_providers or ()), fallback)
    with _LOADING:
        if key not in _ONNX_MODELS:
            engine = OnnxEngine.load(path, settings)
            _LOADS[name] += 1
            batches = FittedBatches(settings.batch_size, memory=HostMemory(settings.ram_budget_bytes))
            _ONNX_MODELS[key] = LoadedModel(engine, engine.fixed_batch(batch_input), batches, name, fallback)
            _LOADED.append(_ONNX_MODELS[key])
        return _ONNX_MODELS[key]


def kept_choice(
    settings: Settings, family: AcceleratorFamily, model: str, *, cpu: CpuProbe = probe_cpu
) -> EngineChoice:
    """:func:`choose_engine`'s choice, or for a model it puts on trial, what the newest trial kept in the compile
    cache on this CPU chose (whatever the model file; ``swapfarm doctor`` prints it and hashes no model file)."""
    choice = choose_engine(settings, family, model, cpu=cpu)
    if not choice.trial:
        return choice
    kept = TrialBook(settings.torch_compile_cache_dir).latest(model, cpu().describe())
    return choice if kept is None else _decided_by(kept)


def _decided_by(trial: Trial) -> EngineChoice:
    return EngineChoice(trial.engine, trial.precision, f"auto: {trial.describe()}")


def kept_trial(path: Path, settings: Settings, family: AcceleratorFamily, precision: Precision) -> Trial | None:
    """The trial of model file ``path`` kept in the compile cache, if one ran on this CPU at this worker's batch."""
    book = TrialBook(settings.torch_compile_cache_dir)
    return book.get(trial_key(path, settings, family, precision))


def trial_key(path: Path, settings: Settings, family: AcceleratorFamily, precision: Precision) -> str:
    return TrialBook.key(sha256_of(path), probe_cpu().describe(), precision, max_batch(settings, family))


def _on_trial_key(path: Path, mtime_ns: int, name: str, batch_input: str, precision: Precision) -> tuple[object, ...]:
    return ("trial", str(path), mtime_ns, name, batch_input, precision)


def _load_on_trial(
    path: Path,
    mtime_ns: int,
    settings: Settings,
    family: AcceleratorFamily,
    name: str,
    batch_input: str,
    precision: Precision,
) -> LoadedModel:
    """Model ``name`` on ONNX Runtime at once, on trial against the compiled torch engine in ``precision``: a thread
    builds that, times both at this worker's batch and keeps the faster (:class:`TrialEngine`), and the verdict is
    kept in the compile cache for later processes."""
    key = _on_trial_key(path, mtime_ns, name, batch_input, precision)
    with _LOADING:
        if key in _ONNX_MODELS:
            return _ONNX_MODELS[key]
        first = OnnxEngine.load(path, settings)
        _LOADS[name] += 1
        fixed = first.fixed_batch(batch_input)
        batch = fixed or max_batch(settings, family)
        inputs = first.example(batch)
        batches = FittedBatches(settings.batch_size, memory=HostMemory(settings.ram_budget_bytes))
        book, kept_as = TrialBook(settings.torch_compile_cache_dir), trial_key(path, settings, family, precision)

        def contender() -> Engine | str:
            built = _build_torch(str(path), name, TorchRecipe.of(settings, family, precision))
            return built if isinstance(built, str) else built[0]

        engine = TrialEngine(
            first,
            contender,
            model=name,
            labels=("onnxruntime fp32", f"torch {precision}"),
            winners=(("onnxruntime", "fp32"), ("torch", precision)),
            inputs=inputs or {},
            batch=batch,
            cpu=probe_cpu().describe(),
            decided=lambda trial: book.put(kept_as, trial),
        )
        loaded = LoadedModel(engine, fixed, batches, name)
        _ONNX_MODELS[key] = loaded
        _LOADED.append(loaded)
    if inputs is None:  # a dynamic input size: nothing to time it on, so it stays where it starts
        logger.warning("model %s stays on ONNX Runtime: its input size is dynamic, so it cannot be timed", name)
    else:
        engine.start()
    return loaded


@dataclass(frozen=True)
class TorchRecipe:
    """How this worker builds a model on the torch engine: its family, the precision, the compile mode, the largest
    batch bucket, the share of free memory a batch may use, the RAM budget and the compile cache folder."""

    family: AcceleratorFamily
    precision: Precision
    mode: CompileMode
    limit: int
    safety: float
    ram_budget_bytes: int | None
    cache_dir: str

    @classmethod
    def of(cls, settings: Settings, family: AcceleratorFamily, precision: Precision) -> TorchRecipe:
        return cls(
            family,
            precision,
            compile_mode(settings, family),
            max_batch(settings, family),
            settings.memory_safety_fraction,
            settings.ram_budget_bytes,
            str(settings.torch_compile_cache_dir),
        )


@cache
def _load_torch(path: str, mtime_ns: int, name: str, batch_input: str, recipe: TorchRecipe) -> LoadedModel | str:
    """The model on the torch engine, or why it cannot be (remembered too: a model is not converted again per
    chunk only to fail again)."""
    built = _build_torch(path, name, recipe)
    if isinstance(built, str):
        return built
    engine, memory = built
    batches = FittedBatches(engine.max_batch, memory=memory, per_item_bytes=engine.per_item_bytes, safety=recipe.safety)
    engine.on_measured = batches.measured
    loaded = LoadedModel(engine, engine.fixed_batch(batch_input), batches, name=name)
    _LOADED.append(loaded)
    return loaded


def _build_torch(path: str, name: str, recipe: TorchRecipe) -> tuple[TorchEngine, DeviceMemory] | str:
    """A new torch engine for the model file (its memory fitted from what a previous process measured), and the
    device's memory; or why the torch engine cannot run the model."""
    from workers.engines.devices import device_for
    from workers.engines.torch_engine import TorchEngine

    try:
        device = device_for(recipe.family)
        memory = memory_for(device, recipe.ram_budget_bytes, probe=FAMILIES[recipe.family].memory)
        engine = TorchEngine.load(
            Path(path),
            device=device,
            precision=recipe.precision,
            mode=recipe.mode,
            max_batch=recipe.limit,
            memory=memory,
            safety=recipe.safety,
            cache_dir=Path(recipe.cache_dir),
        )
    except ModelError as error:
        logger.warning("model %s: the torch engine cannot run it; using ONNX Runtime (slower): %s", name, error)
        return str(error)
    _LOADS[name] += 1
    engine.prepare()
    return engine, memory
