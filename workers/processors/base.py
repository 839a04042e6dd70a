"""The processor interface: a batch of frames in, the same number of frames out.

A processor is built once per chunk by its registered factory (models are cached per process by the engine
layer, so building is cheap after the first time) and then sees the chunk's frames batch by batch.

A face processor also splits its work into :data:`Stage` steps (select and align, run the model, paste back) that
the render pipeline (:mod:`workers.pipeline`) runs on threads of their own, so the model never waits on Python or
I/O; faces are detected once per frame for the whole chain, on the frames as decoded (:class:`Work`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from shared.options import JobOptions, ProcessorName
from shared.settings import Settings
from shared.tallies import FaceTally
from workers.engines.base import Degradation

if TYPE_CHECKING:
    from workers.faces.detection import Face, FaceDetector
    from workers.faces.targeting import FaceTargeter

logger = logging.getLogger(__name__)

# A batch of frames: uint8, shape [N, H, W, 3], BGR (OpenCV's order), as ffmpeg's bgr24 pipe gives it.
FrameBatch = npt.NDArray[np.uint8]


@dataclass
class Work:
    """One batch of frames on its way through a chain's stages.

    Attributes:
        frames: the frames, as the last stage left them.
        faces: every face detected in each frame as decoded (one detection for the whole chain).
        targets: the faces the job's selector mode picks among them, per frame.
        state: what a processor's stage hands its next stage (aligned crops, model outputs).
        device: the device path's copy of the batch (:class:`workers.device.feed.DeviceFrames`), ``None`` on
            the OpenCV path.
    """

    frames: FrameBatch
    faces: list[list[Face]] | None = None
    targets: list[list[Face]] | None = None
    state: object = None
    device: object = None


Stage = Callable[[Work], Work]
"""One step of a processor, run on its own thread by the pipeline."""


class Staged(Protocol):
    """A processor whose work the pipeline can overlap: its :meth:`stages` after the chain's face detection.

    ``detector`` finds the faces; ``targeter`` (``None`` for processors that take every face) selects among them.
    """

    detector: FaceDetector
    targeter: FaceTargeter | None

    def stages(self) -> Sequence[Stage]: ...


@runtime_checkable
class Tallied(Protocol):
    """A processor that says what it did in a chunk (face-frames hidden); the render step records it as a
    ``faces`` event of the job when the chunk is accepted."""

    def tally(self) -> FaceTally: ...


class Reporter:
    """Reports each new :class:`~workers.engines.base.Degradation` of some models once: when built, and after
    every batch (a compile that fails does so on its first batch)."""

    def __init__(self, report: Report, *sources: Callable[[], list[Degradation]]) -> None:
        self._report, self._sources, self._seen = report, sources, set[Degradation]()
        self.check()

    def check(self) -> None:
        for source in self._sources:
            for degradation in source():
                if degradation not in self._seen:
                    self._seen.add(degradation)
                    self._report(degradation)


class Processor(Protocol):
    """Turns a batch of frames into the same number of frames.

    Every processor declares ``touches_pixels``: one that never reads or changes pixels (``passthrough``) says
    ``False``, and a chain of only such processors is rendered by one ffmpeg process, with no frames through
    Python at all.
    """

    touches_pixels: bool

    def process(self, frames: FrameBatch) -> FrameBatch:
        """Return the processed frames: same shape and dtype, one output frame per input frame, in order (the
        ``frame_enhancer``, last in its chain, alone returns them larger by its scale: see shared/framing.py)."""
        ...


Report = Callable[[Degradation], None]
"""Where a processor reports a slower path its models took (the render step makes it a job event)."""


def _log_only(degradation: Degradation) -> None:
    logger.warning("%s: %s", degradation.kind, degradation.message)


@dataclass(frozen=True)
class ProcessorContext:
    """What a processor factory may use: the job's options, its source images (local files), the settings, and
    ``report``: where to report a :class:`~workers.engines.base.Degradation` of its models (at build time and
    whenever one appears later, e.g. a compile that fails on the first batch)."""

    options: JobOptions
    sources: Sequence[Path]
    settings: Settings
    report: Report = _log_only


ProcessorFactory = Callable[[ProcessorContext], Processor]

_REGISTRY: dict[str, ProcessorFactory] = {}


def register(name: ProcessorName) -> Callable[[ProcessorFactory], ProcessorFactory]:
    """Register a processor factory under a name from :data:`shared.options.ProcessorName`."""

    def decorator(factory: ProcessorFactory) -> ProcessorFactory:
        _REGISTRY[name] = factory
        return factory

    return decorator


def registered() -> tuple[str, ...]:
    """The names of the registered processors, sorted."""
    return tuple(sorted(_REGISTRY))


def build(name: ProcessorName, context: ProcessorContext) -> Processor:
    """Build the processor registered as ``name``.

    Raises:
        KeyError: no processor of that name is registered in this worker.
    """
    return _REGISTRY[name](context)
