"""Running many items through an engine in as few calls as the model allows, in batches that fit in memory."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from shared.errors import RetryableError
from workers.engines.base import Engine, Tensor
from workers.engines.memory import DeviceMemory, fitted_batch

logger = logging.getLogger(__name__)

Indices = npt.NDArray[np.intp]


def run_in_batches(
    engine: Engine,
    count: int,
    inputs: Callable[[Indices], Mapping[str, Tensor]],
    fixed_batch: int | None = None,
    *,
    run: Callable[[Mapping[str, Any]], list[Any]] | None = None,
    join: Callable[[list[Any]], Any] | None = None,
) -> list[Tensor]:
    """Run ``count`` items through ``engine`` and join the outputs along the batch axis.

    ``inputs(indices)`` builds the inputs of the items at ``indices``. With ``fixed_batch`` ``None`` (a
    dynamic batch dimension) all items go in one call; otherwise each call gets exactly ``fixed_batch`` items,
    the last call padded by repeating its last item and the padding dropped from the outputs. Every output
    must be per item. ``run`` replaces ``engine.run`` and ``join`` numpy's concatenation, e.g. for tensors on a
    device (:meth:`~workers.engines.torch_engine.TorchEngine.run_on_device`, ``torch.cat``).

    Raises:
        ValueError: ``count`` is not positive.
    """
    if count < 1:
        raise ValueError(f"nothing to run: count is {count}")
    step = fixed_batch or count
    parts: list[list[Tensor]] = []
    for start in range(0, count, step):
        indices = np.minimum(np.arange(start, start + step), count - 1)
        kept = min(step, count - start)
        parts.append([output[:kept] for output in (run or engine.run)(inputs(indices))])
    return [(join or _concatenate)(list(outputs)) for outputs in zip(*parts, strict=True)]


def _concatenate(parts: list[Any]) -> Any:
    return np.concatenate(parts, axis=0)


Items = TypeVar("Items", bound=npt.NDArray[Any])


class FittedBatches:
    """Runs items through a model step in batches as large as memory allows, never dropping one.

    The batch is at most ``limit`` items (the engine's largest warmed-up bucket, or the configured batch size),
    and — when ``per_item_bytes`` is known — at most what fits in the device's free memory × ``safety``
    (a power of two, so it lands on a warmed-up bucket). When a batch runs out of memory the device's cache is
    released, the cap is halved and the *same* items are tried again; the cap is remembered for later calls
    (:attr:`cap`, and :attr:`backoffs` counts the halvings). Without a ``memory`` errors simply propagate.

    Example::

        batches = FittedBatches(limit=32, memory=TorchDeviceMemory(), per_item_bytes=engine.per_item_bytes)
        swapped = batches.map(crops, lambda batch: swapper.swap(batch, latent))
    """

    def __init__(
        self,
        limit: int,
        *,
        memory: DeviceMemory | None = None,
        per_item_bytes: int | None = None,
        safety: float = 0.8,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self.limit = limit
        self.memory = memory
        self.per_item_bytes = per_item_bytes
        self.safety = safety
        self.cap = limit
        self.backoffs = 0

    def measured(self, per_item_bytes: int) -> None:
        """The engine measured the memory one more item costs: later batches are fitted to it."""
        self.per_item_bytes = per_item_bytes

    def size(self) -> int:
        """Items in the next batch."""
        if self.memory is None or not self.per_item_bytes:
            return self.cap
        return min(self.cap, fitted_batch(self.memory.free_bytes(), self.per_item_bytes, self.safety, self.limit))

    def map(
        self, items: Items, step: Callable[[Items], Items], join: Callable[[list[Any]], Any] | None = None
    ) -> Items:
        """``step`` over consecutive batches of ``items``, results joined in order: by ``join`` where given (e.g.
        ``torch.cat`` for a torch back-end's tensors, left where they are), else as numpy arrays.

        Raises:
            ValueError: ``step`` returned a different number of results than it was given.
            RetryableError: a single item does not fit in memory (code ``out_of_memory``).
        """
        if len(items) == 0:
            return cast(Items, items[:0]) if join is not None else items.copy()
        parts: list[Any] = []
        start = 0
        while start < len(items):
            batch = cast(Items, items[start : start + self.size()])
            try:
                result = step(batch) if join is not None else np.asarray(step(batch))
            except Exception as error:
                if self.memory is None or not self.memory.is_out_of_memory(error):
                    raise
                self._back_off(len(batch), error)
                continue
            if len(result) != len(batch):
                raise ValueError(f"a face model returned {len(result)} results for {len(batch)} items")
            parts.append(result)
            start += len(batch)
        return cast(Items, join(parts) if join is not None else np.concatenate(parts))

    def _back_off(self, size: int, error: Exception) -> None:
        assert self.memory is not None
        self.memory.release()
        if size <= 1:
            raise RetryableError(
                f"out of memory on {self.memory.device} with a single item: {error}", code="out_of_memory"
            ) from error
        self.cap = max(1, size // 2)
        self.backoffs += 1
        logger.warning(
            "out of memory on %s with a batch of %d; retrying the same items %d at a time",
            self.memory.device, size, self.cap,
        )  # fmt: skip
