"""Running many items through an engine in as few calls as the model allows."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import numpy.typing as npt

from workers.engines.base import Engine, Tensor

Indices = npt.NDArray[np.intp]


def run_in_batches(
    engine: Engine,
    count: int,
    inputs: Callable[[Indices], Mapping[str, Tensor]],
    fixed_batch: int | None = None,
) -> list[Tensor]:
    """Run ``count`` items through ``engine`` and join the outputs along the batch axis.

    ``inputs(indices)`` builds the inputs of the items at ``indices``. With ``fixed_batch`` ``None`` (a
    dynamic batch dimension) all items go in one call; otherwise each call gets exactly ``fixed_batch`` items,
    the last call padded by repeating its last item and the padding dropped from the outputs. Every output
    must be per item.

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
        parts.append([output[:kept] for output in engine.run(inputs(indices))])
    return [np.concatenate(outputs, axis=0) for outputs in zip(*parts, strict=True)]
