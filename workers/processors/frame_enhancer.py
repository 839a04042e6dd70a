"""``frame_enhancer``: every whole frame upscaled by a Real-ESRGAN model (×2 or ×4), tiled with overlap and batched
(:mod:`workers.upscaling`), then blended over the frame resized to the same size (``frame_enhancer.blend``).

It is the one processor whose frames come out larger than they went in: it runs last in the chain, and the render
step decodes at the output size divided by its scale and encodes at the output size (:mod:`shared.output_frames`).
Its pixel work is written once, against the frame back-ends (:meth:`FrameEnhancerProcessor.on_frames`: the tiles
cut, run and joined where the frames are).
"""

from __future__ import annotations

from typing import Any

from workers.frames.backend import FrameBackend
from workers.frames.batch import Frames
from workers.frames.host import HostBackend
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, register
from workers.upscaling import FrameEnhancer


class FrameEnhancerProcessor:
    """Upscales each batch of frames by the model's scale.

    Args:
        enhancer: the loaded model.
        blend: percent of the upscaled frame over the resized input (0–100).
        reporter: checks the model's slower paths after each batch (a compile that fails does so on its first).
    """

    touches_pixels = True

    def __init__(self, enhancer: FrameEnhancer, *, blend: int = 80, reporter: Reporter | None = None) -> None:
        self.enhancer = enhancer
        self.blend = blend
        self._reporter = reporter

    @property
    def scale(self) -> int:
        """How many times wider and taller the frames come out."""
        return self.enhancer.scale

    @classmethod
    def from_context(cls, context: ProcessorContext) -> FrameEnhancerProcessor:
        """Build from a job's context, loading the model through the model registry."""
        options = context.options.frame_enhancer
        enhancer = FrameEnhancer.load(options.model, context.settings)
        return cls(enhancer, blend=options.blend, reporter=Reporter(context.report, enhancer.degradations))

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames, ``scale`` times wider and taller: ``[N, H, W, 3]`` → ``[N, sH, sW, 3]``."""
        backend = HostBackend()
        return backend.ensure_bgr(self.on_frames(backend, backend.frames(bgr=frames)))

    def on_frames(self, backend: FrameBackend[Any], frames: Frames[Any]) -> Frames[Any]:
        """The batch upscaled and blended on ``backend`` (:class:`~workers.processors.base.OnFrames`)."""
        upscaled = backend.upscale(frames, self.enhancer, self.blend)
        self.report()
        return upscaled

    def report(self) -> None:
        """Tell the job of the model's slower paths, if it took one since the last batch."""
        if self._reporter is not None:
            self._reporter.check()


@register("frame_enhancer")
def _build(context: ProcessorContext) -> FrameEnhancerProcessor:
    return FrameEnhancerProcessor.from_context(context)
