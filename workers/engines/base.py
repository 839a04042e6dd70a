"""The engine interface: one object per loaded model, running named inputs to a list of outputs.

Two engines implement it: ONNX Runtime (:class:`workers.engines.onnx.OnnxEngine`) and the compiled torch engine
(:class:`workers.engines.torch_engine.TorchEngine`, the ONNX graph converted by :mod:`workers.engines.onnx_to_torch`).
:func:`workers.engines.loading.load_model` picks one per model and accelerator family; a model that takes a slower
path than the one configured reports a :class:`Degradation`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

Tensor = npt.NDArray[np.generic]


class Engine(Protocol):
    @property
    def input_names(self) -> tuple[str, ...]: ...

    @property
    def output_names(self) -> tuple[str, ...]: ...

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        """Run one batch; outputs in the model's output order."""
        ...

    def warmup(self) -> None:
        """Run once on zeros of the model's input shapes (batch 1) so the first real batch is not slow."""
        ...


@dataclass(frozen=True)
class Degradation:
    """A slower path a model took instead of the configured one (ONNX Runtime instead of the torch engine, eager
    instead of compiled). Never silent: the render step turns each into a job event, a log line and a metric.

    Attributes:
        kind: a stable code: ``engine_fallback`` (the torch engine cannot run the model; ONNX Runtime runs it)
            , ``eager_fallback`` (compiling failed; the model runs uncompiled) or ``precision_fallback`` (int8 was
            chosen but failed its quality guard, or could not be quantised; the model runs in bf16).
        model: the model's registry name.
        message: what happened and why, for the user.
    """

    kind: str
    model: str
    message: str


@dataclass
class EngineStats:
    """Counters of one torch engine (:class:`~workers.engines.torch_engine.TorchEngine`), for logs and metrics."""

    compiles: int = 0
    """Buckets compiled (first calls of a compiled shape; from the compile cache, if it has them)."""
    compile_seconds: float = 0.0
    """Wall time of those first calls."""
    eager_fallbacks: int = 0
    """Times compiling failed and the engine switched to eager execution (0 or 1)."""
    fallback_reason: str | None = None
    warmed_buckets: list[int] = field(default_factory=list)
    """Buckets compiled ahead of use by its ``warmup``."""
    padded_items: int = 0
    """Items computed only to fill a bucket (repeats, thrown away)."""
    computed_items: int = 0
    """Items computed in all, padding included."""
    int8: str | None = None
    """How an int8 engine got its quantised graph: ``calibrated`` (here, on its first items) or ``cache`` (a
    previous process's, loaded); ``None`` while calibrating or when not int8."""
    calibrated_items: int = 0
    """Items this process calibrated on (0 when the graph came from the cache)."""
    guard: str | None = None
    """The int8 guard's verdict in words (:class:`workers.engines.quantising.Verdict`)."""
    precision_fallback: str | None = None
    """Why an int8 engine runs in bf16 instead (the guard failed, or the model could not be quantised)."""
