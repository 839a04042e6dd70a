"""Compiling a converted model, and what the torch engine plans and remembers around it: how a model is converted
for a precision (:func:`conversion`), ``torch.compile`` with the options measured faster on the CPU
(:func:`compile_module`), the persistent compile cache (:func:`use_compile_cache`), the batch buckets and how a
batch is split into calls (:func:`buckets`, :func:`plan_calls`), and the per-item memory measured once and kept
beside the cache (:class:`MemoryNotes`).

Import this module only where torch may be imported (see :mod:`workers.engines.torch_engine`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from shared.settings import CompileMode, Precision
from workers.engines.cache_files import write_json

logger = logging.getLogger(__name__)

TRACING = threading.RLock()
"""Held while a graph is traced: a first (compiling) call of a compiled module, or ``torch.export``. The two share
process-wide state — while one thread exports, another thread's ``torch.compile`` is ignored ("torch.compile is
ignored when called inside torch.export region") or fails ("logging.Logger method not supported") and its model
falls back to eager — so a trial's thread exporting a model to quantise it must not overlap a compile elsewhere."""


def tracing(compiling: bool) -> contextlib.AbstractContextManager[Any]:
    """:data:`TRACING` where a call ``compiling`` (traces a graph), else nothing."""
    return TRACING if compiling else contextlib.nullcontext()


TORCH_FLOOR = (2, 7)
"""The oldest torch the engine runs on: dynamo's recompile limits have carried these names since 2.7 (2.6 raises on
them). The worker extras pin 2.13; the lent GPU machine's image has 2.11, on which the GPU paths run unchanged."""
if tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2]) < TORCH_FLOOR:
    raise ImportError(f"torch {torch.__version__} is older than the torch engine needs (2.7 or later)")

PRECISIONS: Mapping[Precision, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "int8": torch.float32,  # converted in fp32, then quantised by PT2E (workers/engines/quantising.py)
}


def conversion(precision: Precision) -> dict[str, torch.dtype]:
    """How a model is converted for ``precision``: fp32 and fp16 compute everything in that type; bf16 is mixed,
    convolutions and matrix products in bf16 and the rest in fp32 (as ``torch.autocast`` does), which keeps the
    swapped faces above 35 dB PSNR of fp32's where all-bf16 fell below (tests/integration/test_face_engine_jobs.py).
    int8 converts in fp32: PT2E quantises that module once it has calibrated."""
    if precision == "bf16":
        return {"float_dtype": torch.float32, "matmul_dtype": torch.bfloat16}
    return {"float_dtype": PRECISIONS[precision]}


Compiled = Callable[..., tuple[torch.Tensor, ...]]
Compiler = Callable[[torch.nn.Module, CompileMode], Compiled]
"""Turns the module into its compiled callable (a seam: tests pass one that fails)."""

# Every engine's module shares one forward code object, and dynamo counts its compiled entries per code object (and
# in all): buckets × engines of a long-lived process (a worker serving several models, a test run) pass the
# defaults (8, 256), and past them a fullgraph compile fails — the eager fallback, slower.
_RECOMPILE_LIMIT, _ACCUMULATED_LIMIT = 512, 1024


def raise_recompile_limits() -> None:
    """Lift dynamo's recompile limits to what an engine needs (see ``_RECOMPILE_LIMIT``); called when compiling
    and before each first call of a shape (something may have restored the defaults in between)."""
    dynamo_config: Any = torch._dynamo.config
    dynamo_config.recompile_limit = max(int(dynamo_config.recompile_limit), _RECOMPILE_LIMIT)
    dynamo_config.accumulated_recompile_limit = max(int(dynamo_config.accumulated_recompile_limit), _ACCUMULATED_LIMIT)


def compile_module(module: torch.nn.Module, mode: CompileMode) -> Compiled:
    """``torch.compile`` as the engine uses it: one whole graph per bucket shape, no dynamic shapes; on the CPU
    with the Inductor options of :data:`CPU_OPTIONS`."""
    raise_recompile_limits()
    with TRACING:  # inside another thread's export, torch.compile returns the module as it is
        if _device_of(module).type != "cpu":
            compiled: Compiled = torch.compile(module, mode=mode, fullgraph=True, dynamic=False)
            return compiled
        options: dict[str, Any] = {**CPU_OPTIONS, "max_autotune": mode == "max-autotune"}
        compiled = torch.compile(module, options=options, fullgraph=True, dynamic=False)
    return compiled


CPU_OPTIONS: Mapping[str, Any] = {}
"""Inductor options on the CPU, each kept only where it measured faster on the full-size swapper at batch 8
(benchmarks/face_swap_cpu.py ``--levers``, side by side, AVX-512 BF16 without AMX, 2 cores): ``freezing`` (weights
folded and prepacked for oneDNN) measured 1.74× ONNX Runtime against 1.98× without it, ``cpp_wrapper`` 1.79× with
a 50 % longer compile, ``max_autotune`` 1.79×: none paid, none is set. On AMX machines prepacking may pay (measure
before adding it here)."""


def compile_quantised(module: torch.nn.Module, mode: CompileMode) -> Compiled:
    """``torch.compile`` of a PT2E int8 graph: one whole graph per bucket shape, with Inductor's freezing, which
    folds the quantise/dequantise pairs around each convolution into oneDNN's int8 (VNNI) convolution with
    prepacked weights (without it the graph runs fp32 kernels between quantise and dequantise steps).

    Freezing is set in Inductor's global config around each call (compiling happens on a shape's first call):
    passed as a ``torch.compile`` option it comes too late for the weights to be frozen, and the prepacking
    fails (``UnsupportedOperatorException: onednn.qconv_prepack``; torch 2.13, torchao 0.18). Set for good it
    would apply to the bf16 models too, where it measured slower (:data:`CPU_OPTIONS`)."""
    raise_recompile_limits()
    options: dict[str, Any] = {"max_autotune": mode == "max-autotune"}
    with TRACING:
        compiled: Compiled = torch.compile(module, options=options, fullgraph=True, dynamic=False)
    inductor: Any = torch._inductor.config

    def frozen(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with inductor.patch(freezing=True):
            return compiled(*inputs)

    return frozen


def _device_of(module: torch.nn.Module) -> torch.device:
    tensor = next(module.buffers(), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def use_compile_cache(folder: Path) -> Path:
    """Make torch keep its compiled artefacts (Inductor's FX graph and autotuning caches, Triton kernels) in
    ``folder``. Must run before the first compile of the process; the environment variable is what Inductor
    reads each time it needs its cache folder."""
    resolved = folder.expanduser().resolve()
    resolved.mkdir(parents=True, exist_ok=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(resolved)
    return resolved


def buckets(limit: int) -> tuple[int, ...]:
    """Batch sizes compiled for: the powers of two up to ``limit`` (``limit`` itself if it is not one).

    Example::

        buckets(8) == (1, 2, 4, 8); buckets(12) == (1, 2, 4, 8, 12)
    """
    sizes = [1 << power for power in range(limit.bit_length()) if 1 << power <= limit]
    return tuple(sizes if sizes[-1] == limit else [*sizes, limit])


MAX_PADDING = 0.1
"""The largest share of a call's items that may be padding (repeats of the last item, computed and thrown away)."""


def plan_calls(count: int, sizes: Sequence[int], max_padding: float = MAX_PADDING) -> list[tuple[int, int]]:
    """How ``count`` items go through buckets ``sizes``: ``(items, bucket)`` per call, in order.

    Full calls of the largest bucket first; the rest goes in the smallest bucket that holds it if the padding is at
    most ``max_padding`` of that bucket, else the largest bucket below it fills up and the remainder is planned the
    same way. So no call computes more than ``max_padding`` padding, and the calls stay few.

    Example::

        plan_calls(42, (1, 2, 4, 8, 16, 32, 64)) == [(32, 32), (8, 8), (2, 2)]   # not one call of 64
        plan_calls(15, (1, 2, 4, 8, 16)) == [(15, 16)]                          # 1 of 16 padded
    """
    largest, calls, left = sizes[-1], [], count
    while left > 0:
        if left >= largest:
            calls.append((largest, largest))
            left -= largest
            continue
        holds = next(size for size in sizes if size >= left)
        if holds - left <= max_padding * holds:
            calls.append((left, holds))
            break
        below = max(size for size in sizes if size < left)
        calls.append((below, below))
        left -= below
    return calls


class MemoryNotes:
    """The measured per-item memory of models, kept in a JSON file beside the compile cache so that a restarted
    worker fits its batch without measuring again. Keys name the model file and how it runs; writes replace the
    file atomically (processes sharing the folder may race: the last write wins, each is a real measurement)."""

    FILE_NAME = "swapfarm-memory.json"

    def __init__(self, folder: Path) -> None:
        self.path = folder / self.FILE_NAME

    def get(self, key: str) -> int | None:
        value = self._read().get(key)
        return int(value) if isinstance(value, int) and value > 0 else None

    def put(self, key: str, per_item_bytes: int) -> None:
        notes = self._read()
        notes[key] = per_item_bytes
        try:
            write_json(self.path, notes, indent=1, sort_keys=True)
        except OSError as error:
            logger.warning("cannot keep the measured memory in %s: %s", self.path, error)

    def _read(self) -> dict[str, object]:
        try:
            loaded = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}
