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
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

from shared.options import JobOptions, ProcessorName
from shared.settings import Settings
from shared.tallies import FaceTally
from workers.engines.base import Degradation

if TYPE_CHECKING:
    from workers.faces.detection import Face, FaceDetector
    from workers.faces.targeting import FaceTargeter
    from workers.frames.backend import FrameBackend
    from workers.frames.batch import Frames

logger = logging.getLogger(__name__)

# A batch of frames: uint8, shape [N, H, W, 3], BGR (OpenCV's order), as ffmpeg's bgr24 pipe gives it.
FrameBatch = npt.NDArray[np.uint8]


@dataclass
class Work:
    """One batch of frames on its way through a chain's stages.

    Attributes:
        frames: the frames as whole BGR frames on the host, as the last stage left them (where the batch is on a
            torch device, the regions a processor rewrote come back to them before a later processor reads them;
            after the last stage, the 4:2:0 planes for the encoder where the frames travel as planes).
        faces: every face detected in each frame as decoded (one detection for the whole chain).
        targets: the faces the job's selector mode picks among them, per frame.
        state: what a processor's stage hands its next stage (aligned crops, model outputs).
        pixels: the batch on the chain's frame back-end (:attr:`backend`), where a processor's pixel work reads
            and writes it (:meth:`on_backend`): the feed's planes and BGR (:class:`workers.frames.feed.FrameFeed`),
            or the host back-end's batch over ``frames``; ``None`` until the first pixel stage.
        backend: the frame back-end :attr:`pixels` is on.
        decoded: a copy of the frames as decoded, kept where a processor reads them (``reads_decoded``) after
            another changed the frames (:func:`workers.pipeline.decoded_kept`); ``None`` where ``frames`` are still
            as decoded when it reads them.
        alpha: each frame's alpha, uint8 ``[N, H, W]``, once a :class:`Matting` processor gave it (``None``
            before, and in every chain without one); the processors after it leave it as it is.
        first: the chunk's number of the batch's first frame (0: the chunk's first output frame; the batch's
            frames follow it in order), given by whoever feeds the chain (the track feed, the pipeline, a
            processor's own ``process``): a processor that needs a frame's place (its audio window) reads it here,
            not from a count of the batches it has seen.
    """

    frames: FrameBatch
    faces: list[list[Face]] | None = None
    targets: list[list[Face]] | None = None
    state: object = None
    pixels: Frames[Any] | None = None
    backend: FrameBackend[Any] | None = None
    decoded: FrameBatch | None = None
    alpha: FrameBatch | None = None
    first: int | None = None

    def on_backend(self) -> tuple[FrameBackend[Any], Frames[Any]]:
        """The batch on its frame back-end, for a processor's pixel work (every pixel operation goes through the
        back-end). Where the chain's frames are whole BGR frames on the host, the first call makes it the host
        back-end's batch over a copy of :attr:`frames` (the frames as decoded stay as they were), which
        :attr:`frames` is from then on."""
        if self.pixels is None or self.backend is None:
            from workers.frames.host import HostBackend  # the back-ends' kernels, loaded with the first batch

            self.backend = HostBackend()
            self.pixels = self.backend.frames(bgr=self.frames.copy())
            self.frames = self.pixels.bgr  # type: ignore[assignment]
        return self.backend, self.pixels

    def adopt(self, pixels: Frames[Any]) -> None:
        """Take ``pixels`` (new whole frames on the same back-end: the frame enhancer's) as the batch; on the host
        back-end their BGR is :attr:`frames` too (elsewhere whole frames replaced reach the host at the end)."""
        self.pixels = pixels
        if self.backend is not None and self.backend.shares_host and pixels.bgr is not None:
            self.frames = pixels.bgr

    def synced(self) -> None:
        """The regions written on a back-end of its own memory (a GPU's) copied to :attr:`frames`, for a later
        processor's host stages to see."""
        pixels, backend = self.pixels, self.backend
        if pixels is None or backend is None:
            return
        if not backend.shares_host and pixels.bgr is not None:
            for index, (x1, y1, x2, y2) in pixels.written:
                self.frames[index, y1:y2, x1:x2] = backend.download(pixels.bgr[index, y1:y2, x1:x2])
        pixels.written.clear()


Stage = Callable[[Work], Work]
"""One step of a processor, run on its own thread by the pipeline."""


class Staged(Protocol):
    """A processor whose work the pipeline can overlap: its :meth:`stages` after the chain's face detection, each
    reading the host's frames (:attr:`Work.frames`) and writing pixels through the frame back-end
    (:meth:`Work.on_backend`) only.

    ``detector`` finds the faces; ``targeter`` (``None`` for processors that take every face) selects among them.
    """

    detector: FaceDetector
    targeter: FaceTargeter | None

    def stages(self) -> Sequence[Stage]: ...


class OnFrames(Protocol):
    """A processor of whole frames written against a frame back-end (``frame_enhancer``): the render path runs
    :meth:`on_frames` in place of ``process``, on whichever back-end holds the frames."""

    def on_frames(self, backend: FrameBackend[Any], frames: Frames[Any]) -> Frames[Any]:
        """The processed frames (on ``backend``, in the form of ``frames``: with planes where it had planes)."""
        ...


def on_frames(processor: object) -> OnFrames | None:
    """``processor`` as an :class:`OnFrames` processor, or ``None`` where its pixel work is not written so."""
    return cast(OnFrames, processor) if callable(getattr(processor, "on_frames", None)) else None


class Matting(Protocol):
    """A processor that gives each frame an alpha channel besides its colour (``background_remover`` with
    ``transparent``): the render path runs :meth:`cut_out` in place of ``process`` and carries the alpha beside
    the frames to the encoder (:func:`workers.pipeline.stages_of`)."""

    def cut_out(self, frames: FrameBatch) -> tuple[FrameBatch, FrameBatch]:
        """The frames, processed, and their alpha: ``[N, H, W, 3]`` → (``[N, H, W, 3]``, uint8 ``[N, H, W]``)."""
        ...


def matting(processor: object) -> Matting | None:
    """``processor`` as a :class:`Matting` processor where it gives alpha (it says so by ``gives_alpha``), else
    ``None``."""
    return cast(Matting, processor) if getattr(processor, "gives_alpha", False) else None


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
        ``frame_enhancer``, last in its chain, alone returns them larger by its scale: see shared/output_frames.py)."""
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
    audio: object = None  # lip_syncer: the chunk's mel windows (``workers.lip_sync.artefact.ChunkAudio``)


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
