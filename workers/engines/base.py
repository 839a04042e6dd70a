"""The engine interface: one object per loaded model, running named inputs to a list of outputs.

ONNX Runtime implements it now; a compiled torch engine plugs in behind the same two methods.
"""

from __future__ import annotations

from collections.abc import Mapping
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
