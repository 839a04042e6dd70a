"""The engine interface: one object per loaded model, running named inputs to a list of outputs.

ONNX Runtime implements it now; a compiled torch engine plugs in behind the same two methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
            or ``eager_fallback`` (compiling failed; the model runs uncompiled).
        model: the model's registry name.
        message: what happened and why, for the user.
    """

    kind: str
    model: str
    message: str
