"""A compiled torch engine behind the :class:`~workers.engines.base.Engine` protocol.

The ONNX file becomes a torch module (:mod:`workers.engines.onnx_to_torch`), compiled once with
``torch.compile(fullgraph=True, dynamic=False)``; on the CPU with the Inductor options that measured faster there
(:data:`workers.engines.compiling.CPU_OPTIONS`). Batches run in a few *buckets* (powers of two up to the largest
batch that fits in memory) so the number of compiled shapes — and CUDA-graph recordings — stays bounded, and a batch
is split rather than padded far past its size (:func:`~workers.engines.compiling.plan_calls`: at most 10 % padding
per call). A bucket compiles when a batch of its size first runs (lazily: a worker compiles only the sizes it uses);
:meth:`TorchEngine.warmup` compiles the largest one ahead of time. The memory one more item costs is measured on a
bucket's second run and kept beside the compile cache (:class:`~workers.engines.compiling.MemoryNotes`), so a
restarted worker fits its batch at once. Compiled code is kept in the persistent cache folder, so a restarted worker
loads it instead of compiling again. If compiling fails the engine falls back to eager execution — with a warning, a
count in :attr:`TorchEngine.stats` and a :class:`~workers.engines.base.Degradation` the job shows, never silently.

Import this module only where torch may be imported: it is loaded lazily by
:func:`workers.engines.loading.load_model`, in the process that runs tasks.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shared.settings import CompileMode, Precision
from workers.engines.base import EngineStats, Tensor
from workers.engines.compiling import (
    Compiled,
    Compiler,
    MemoryNotes,
    buckets,
    compile_module,
    conversion,
    plan_calls,
    raise_recompile_limits,
    tracing,
    use_compile_cache,
)
from workers.engines.int8_steps import Int8Steps
from workers.engines.memory import DeviceMemory, HostMemory, fitted_batch, per_item_bytes
from workers.engines.onnx_to_torch import OnnxModule, TensorSpec, convert, numpy_dtype
from workers.engines.quantising import Int8Plan, QuantisedGraphs, model_hash

logger = logging.getLogger(__name__)


class TorchEngine(Int8Steps):
    """One ONNX model run by torch: converted, optionally compiled, batches padded to buckets.

    Args:
        module: the converted model.
        device: torch device (``cpu``, ``cuda``, ``cuda:1``).
        precision: compute dtype of floating-point tensors; outputs come back as the model declares them.
        mode: ``torch.compile`` mode, or ``eager`` for none.
        max_batch: the largest bucket before memory fitting (see :meth:`warmup`).
        memory: the device's memory, for fitting the batch to it and recognising out-of-memory errors.
        safety: share of free memory a batch may plan to use.
        compiler: how to compile (default :func:`compile_module`).
        spatial_size: fills dynamic non-batch dimensions of inputs for :meth:`warmup`.
        notes: where measured per-item memory is kept between processes, under ``notes_key``.
        int8: for ``precision="int8"``: where quantised graphs are kept and how to build the bf16 module it falls
            back to (:class:`~workers.engines.int8_steps.Int8Steps`: calibrate, quantise, guard, or bf16).
    """

    def __init__(
        self,
        module: OnnxModule,
        *,
        device: str = "cpu",
        precision: Precision = "fp32",
        mode: CompileMode = "default",
        max_batch: int = 8,
        memory: DeviceMemory | None = None,
        safety: float = 0.8,
        compiler: Compiler = compile_module,
        spatial_size: int | None = None,
        notes: MemoryNotes | None = None,
        notes_key: str = "",
        int8: Int8Plan | None = None,
    ) -> None:
        self._device = torch.device(device)
        self._dtype = conversion(precision)["float_dtype"]  # what inputs are fed as
        self._precision: Precision = precision
        self._module: torch.nn.Module = module.to(self._device)
        self._inputs: tuple[TensorSpec, ...] = module.inputs
        self._outputs: tuple[TensorSpec, ...] = module.outputs
        self._mode = mode
        self._limit = max_batch
        self._buckets = buckets(max_batch)
        self.memory: DeviceMemory = memory or HostMemory()
        self._safety = safety
        self._spatial_size = spatial_size
        self._lock = threading.Lock()
        self._seen: set[tuple[int, ...]] = set()
        self.stats = EngineStats()
        self.per_item_bytes: int | None = None
        self.on_measured: Callable[[int], None] | None = None
        """Called with the per-item memory when it is measured (the loader updates its batch sizing)."""
        self._notes, self._notes_key = notes, notes_key
        self._runs: dict[int, int] = {}  # bucket → calls so far
        self._peaks: dict[int, int] = {}  # bucket → measured peak of its second call
        self._forward: Compiled = self._module
        self._graphs = self._device.type == "cuda" and mode in {"reduce-overhead", "max-autotune"}
        self._compiler = compiler
        self._int8 = int8 if precision == "int8" else None
        self._calibration: list[tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]] = []
        if precision == "int8" and int8 is None:
            raise ValueError("precision int8 needs an Int8Plan")
        if self._int8 is not None:
            self._start_int8(self._int8)
        elif mode != "eager":
            try:
                self._forward = compiler(self._module, mode)
            except Exception as error:  # torch.compile's own checks raise plain exceptions of many kinds
                self._fall_back(error)

    @classmethod
    def load(
        cls,
        path: Path,
        *,
        device: str,
        precision: Precision,
        mode: CompileMode,
        max_batch: int,
        memory: DeviceMemory | None,
        safety: float,
        cache_dir: Path,
        spatial_size: int | None = None,
    ) -> TorchEngine:
        """Convert and compile the model file at ``path`` (compiling itself happens per bucket, on first use).

        Raises:
            ModelError: the file cannot be read or uses an operator the converter does not support.
        """
        folder = use_compile_cache(cache_dir)
        started = time.perf_counter()
        module = convert(path, **conversion(precision))
        int8 = None
        if precision == "int8":
            key = QuantisedGraphs.key(model_hash(path), device)
            int8 = Int8Plan(QuantisedGraphs(folder), key, lambda: convert(path, **conversion("bf16")), model=path.name)
        logger.info(
            "model %s on torch %s (%s, %s, buckets up to %d, compile cache %s); converted in %.1fs",
            path.name, device, precision, mode, max_batch, folder, time.perf_counter() - started,
        )  # fmt: skip
        stat = path.stat()
        return cls(
            module,
            device=device,
            precision=precision,
            mode=mode,
            max_batch=max_batch,
            memory=memory,
            safety=safety,
            spatial_size=spatial_size,
            notes=MemoryNotes(folder),
            notes_key=f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}:{device}:{precision}:{mode}:{torch.__version__}",
            int8=int8,
        )

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self._inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self._outputs)

    @property
    def precision(self) -> Precision:
        """The precision in force: ``int8`` once quantised (or while calibrating), ``bf16`` after a precision
        fallback, else the configured one."""
        if self.stats.precision_fallback:
            return "bf16"
        return "int8" if self._int8 is not None else self._precision

    @property
    def calibrating(self) -> bool:
        """An int8 engine that has not yet met the items it calibrates on (it runs fp32, uncompiled, until then)."""
        return self._int8 is not None and self.stats.int8 is None and not self.stats.precision_fallback

    @property
    def mode(self) -> CompileMode:
        """The mode in force: the configured one, or ``eager`` after a fallback."""
        return "eager" if self.stats.eager_fallbacks else self._mode

    @property
    def buckets(self) -> tuple[int, ...]:
        """The batch sizes this engine compiles for."""
        return self._buckets

    @property
    def max_batch(self) -> int:
        """The largest bucket (after :meth:`warmup`, fitted to free memory)."""
        return self._buckets[-1]

    def fixed_batch(self, name: str) -> int | None:
        """The batch size input ``name`` is fixed to, or ``None`` if its leading dimension is dynamic."""
        spec = next(spec for spec in self._inputs if spec.name == name)
        leading = spec.dims[0] if spec.dims else None
        return leading if isinstance(leading, int) else None

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        """Run any number of items; they go through in bucket-sized calls, outputs joined in order.

        Raises:
            ValueError: ``inputs`` does not name exactly the model's inputs, or batched inputs disagree in size.
        """
        arrays, count = self._inputs_of(inputs, lambda a, spec: np.asarray(a, numpy_dtype(spec.elem_type)))
        with self._lock, torch.inference_mode():
            tensors = [self._tensor(array) for array in arrays]
            # To the host at once: CUDA-graph replays reuse their output buffers on the next call.
            return self._numpy(self._batched(tensors, count, lambda t: t.to("cpu")))

    def run_on_device(self, inputs: Mapping[str, torch.Tensor]) -> list[torch.Tensor]:
        """:meth:`run` for tensors already on the engine's device (a torch back-end's frames), outputs left there as
        the model computes them (in the engine's precision; floats not cast back). Raises ValueError as :meth:`run`.
        """
        tensors, count = self._inputs_of(inputs, lambda t, _: t.to(self._device))
        tensors = [t.to(self._dtype) if t.is_floating_point() else t for t in tensors]
        # Copies where CUDA graphs replay: the next call reuses their output buffers.
        keep: Callable[[torch.Tensor], torch.Tensor] = torch.Tensor.clone if self._graphs else lambda t: t
        with self._lock, torch.inference_mode():
            return self._batched(tensors, count, keep)

    def _inputs_of(
        self, inputs: Mapping[str, Any], convert: Callable[[Any, TensorSpec], Any]
    ) -> tuple[list[Any], int | None]:
        """The model's inputs in its order, each ``convert``ed, and how many items the batched ones hold."""
        if set(inputs) != set(self.input_names):
            raise ValueError(f"model inputs are {list(self.input_names)}, got {sorted(inputs)}")
        items = [convert(inputs[spec.name], spec) for spec in self._inputs]
        counts = {len(item) for item, spec in zip(items, self._inputs, strict=True) if spec.batched}
        if len(counts) > 1:
            raise ValueError(f"batched inputs disagree in size: {sorted(counts)}")
        return items, counts.pop() if counts else None

    def _batched(
        self, tensors: list[torch.Tensor], count: int | None, keep: Callable[[torch.Tensor], torch.Tensor]
    ) -> list[torch.Tensor]:
        """The model over ``count`` items (``None``: no batched input, one call) in bucket-sized calls, each
        call's outputs passed through ``keep`` before the next call, joined in order."""
        if count is None:
            return [keep(output) for output in self._call(tensors)]
        parts: list[list[torch.Tensor]] = [[] for _ in self._outputs]
        start = 0
        for size, bucket in plan_calls(count, self._buckets):
            batch = [
                self._pad(tensor[start : start + size], bucket) if spec.batched else tensor
                for tensor, spec in zip(tensors, self._inputs, strict=True)
            ]
            for part, output, spec in zip(parts, self._call(batch, bucket), self._outputs, strict=True):
                part.append(keep(output[:size] if spec.batched else output))
            self.stats.padded_items += bucket - size
            self.stats.computed_items += bucket
            start += size
        return [torch.cat(part) if spec.batched else part[0] for part, spec in zip(parts, self._outputs, strict=True)]

    def prepare(self) -> None:
        """Fit the buckets to free memory from the per-item memory a previous process measured, if one did; else
        it is measured on the second run of the first bucket used. Compiles nothing."""
        known = self._notes.get(self._notes_key) if self._notes is not None else None
        if known is not None:
            self.per_item_bytes = known
            self._fit()
            logger.info("per-item memory %s (measured before, kept in %s)", _size(known), self._notes_path())

    def warmup(self) -> None:
        """Compile the largest bucket — the one a busy worker runs — and run it twice, measuring the memory one
        more item costs (then fitting the buckets to free memory). Other buckets compile when first used. Skipped
        where input sizes are dynamic, and by an int8 engine still calibrating (on the job's first items, not zeros)."""
        if self.calibrating or any(self._concrete(spec) is None for spec in self._inputs):
            return
        bucket = self._buckets[-1]
        for _ in range(2 if self.per_item_bytes is None else 1):
            zeros = [
                np.zeros((bucket, *shape[1:]) if spec.batched else shape, numpy_dtype(spec.elem_type))
                for spec in self._inputs
                if (shape := self._concrete(spec)) is not None
            ]
            with self._lock, torch.inference_mode():
                self._call([self._tensor(array) for array in zeros], bucket)
        self.stats.warmed_buckets.append(bucket)
        logger.info(
            "warm: bucket %d compiled, %s per item, %d compiles in %.1fs (mode %s)",
            bucket, _size(self.per_item_bytes), self.stats.compiles, self.stats.compile_seconds, self.mode,
        )  # fmt: skip

    def _fit(self) -> None:
        if not self.per_item_bytes:
            return
        fitted = fitted_batch(self.memory.free_bytes(), self.per_item_bytes, self._safety, self._limit)
        if fitted < self._buckets[-1]:
            logger.info("batch fitted to %s: %d (of %d) at %s per item", self.memory.device, fitted, self._limit,
                        _size(self.per_item_bytes))  # fmt: skip
            self._buckets = tuple(b for b in self._buckets if b <= fitted)

    def _measured(self, bucket: int, peak: int) -> None:
        """A bucket's second run peaked at ``peak`` bytes above its start: update the per-item memory, keep it
        for the next process, refit."""
        self._peaks[bucket] = peak
        per_item = per_item_bytes(self._peaks)
        if per_item <= 0 or per_item == self.per_item_bytes:
            return
        self.per_item_bytes = max(per_item, self.per_item_bytes or 0) if len(self._peaks) > 1 else per_item
        if self._notes is not None:
            self._notes.put(self._notes_key, self.per_item_bytes)
        self._fit()
        if self.on_measured is not None:
            self.on_measured(self.per_item_bytes)

    def _notes_path(self) -> Path | None:
        return self._notes.path if self._notes is not None else None

    def _concrete(self, spec: TensorSpec) -> tuple[int, ...] | None:
        sizes = [
            d if isinstance(d, int) else 1 if axis == 0 else self._spatial_size for axis, d in enumerate(spec.dims)
        ]
        return None if any(s is None for s in sizes) else tuple(s for s in sizes if s is not None)

    def _tensor(self, array: np.ndarray[Any, Any]) -> torch.Tensor:
        tensor = torch.from_numpy(np.ascontiguousarray(array)).to(self._device)
        return tensor.to(self._dtype) if tensor.is_floating_point() else tensor

    @staticmethod
    def _pad(tensor: torch.Tensor, bucket: int) -> torch.Tensor:
        missing = bucket - len(tensor)
        if missing == 0:
            return tensor
        return torch.cat([tensor, tensor[-1:].expand(missing, *tensor.shape[1:])])

    def _numpy(self, outputs: Sequence[torch.Tensor]) -> list[Tensor]:
        return [
            output.to("cpu", torch.float32 if output.is_floating_point() else output.dtype)
            .numpy()
            .astype(numpy_dtype(spec.elem_type), copy=False)
            for output, spec in zip(outputs, self._outputs, strict=True)
        ]

    def _call(self, tensors: Sequence[torch.Tensor], bucket: int = 0) -> tuple[torch.Tensor, ...]:
        if self.calibrating:
            return self._calibrate(tensors, bucket)
        shape = tuple(int(t.shape[0]) if t.dim() else 0 for t in tensors)
        first = self._forward is not self._module and shape not in self._seen
        self._runs[bucket] = runs = self._runs.get(bucket, 0) + 1
        measure = bucket > 0 and runs == 2 and bucket not in self._peaks  # the first run's peak is the compiler's
        if measure:
            self.memory.release()
            self.memory.reset_peak()
            base = self.memory.used_bytes()
        if first:
            raise_recompile_limits()
        started = time.perf_counter()
        if self._graphs:  # the previous call's outputs are consumed: its CUDA-graph buffers may be reused
            compiler: Any = torch.compiler  # untyped in torch
            compiler.cudagraph_mark_step_begin()
        try:
            with tracing(first):
                outputs = self._forward(*tensors)
        except Exception as error:
            if self._forward is self._module or self.memory.is_out_of_memory(error):
                raise
            eager: tuple[torch.Tensor, ...] = self._module(*tensors)  # raises if the model fails, not the compiler
            self._fall_back(error)
            return eager
        if first:
            self._seen.add(shape)
            self.stats.compiles += 1
            self.stats.compile_seconds += time.perf_counter() - started
            logger.info("compiled batch %d in %.1fs", bucket or shape[0], time.perf_counter() - started)
        if measure:
            if self._device.type == "cuda":
                torch.cuda.synchronize(self._device)
            self._measured(bucket, max(0, self.memory.peak_bytes() - base))
        return outputs

    def _fall_back(self, error: BaseException) -> None:
        self.stats.eager_fallbacks += 1
        self.stats.fallback_reason = f"{type(error).__name__}: {error}"
        self._forward = self._module
        self._graphs = False
        logger.warning(
            "torch.compile (mode %s) failed; running this model eagerly (slower): %s",
            self._mode, self.stats.fallback_reason.splitlines()[0][:500],
        )  # fmt: skip


def _size(count: int | None) -> str:
    return "?" if count is None else f"{count / 2**20:.1f} MiB"
