"""The processor interface: a batch of frames in, the same number of frames out.

A processor is built once per chunk by its registered factory (models are cached per process by the engine
layer, so building is cheap after the first time) and then sees the chunk's frames batch by batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

from shared.options import JobOptions, ProcessorName
from shared.settings import Settings

# A batch of frames: uint8, shape [N, H, W, 3], BGR (OpenCV's order), as ffmpeg's bgr24 pipe gives it.
FrameBatch = npt.NDArray[np.uint8]


class Processor(Protocol):
    """Turns a batch of frames into the same number of frames.

    A processor that never reads or changes pixels (``passthrough``) sets ``touches_pixels = False``; a chain of
    only such processors is rendered by one ffmpeg process, with no frames through Python at all.
    """

    def process(self, frames: FrameBatch) -> FrameBatch:
        """Return the processed frames: same shape and dtype, one output frame per input frame, in order."""
        ...


@dataclass(frozen=True)
class ProcessorContext:
    """What a processor factory may use: the job's options, its source images (local files), the settings."""

    options: JobOptions
    sources: Sequence[Path]
    settings: Settings


ProcessorFactory = Callable[[ProcessorContext], Processor]

_REGISTRY: dict[str, ProcessorFactory] = {}


def register(name: ProcessorName) -> Callable[[ProcessorFactory], ProcessorFactory]:
    """Register a processor factory under a name from :data:`shared.options.ProcessorName`."""

    def decorator(factory: ProcessorFactory) -> ProcessorFactory:
        _REGISTRY[name] = factory
        return factory

    return decorator


def registered() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def build(name: ProcessorName, context: ProcessorContext) -> Processor:
    """Build the processor registered as ``name``.

    Raises:
        KeyError: no processor of that name is registered in this worker.
    """
    return _REGISTRY[name](context)
