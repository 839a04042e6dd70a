"""An engine wrapper for tests that prove how a model is called: it passes every call through to a real engine and
keeps the batch size of each (the length of the call's first input)."""

from __future__ import annotations

from collections.abc import Mapping

from workers.engines.base import Engine, Tensor


class CountingEngine:
    """Passes calls through to ``inner``, keeping the batch size of each call in ``batches``."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.batches: list[int] = []

    @property
    def calls(self) -> int:
        return len(self.batches)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.inner.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.inner.output_names

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        self.batches.append(len(next(iter(inputs.values()))))
        return self.inner.run(inputs)

    def warmup(self) -> None:
        self.inner.warmup()
