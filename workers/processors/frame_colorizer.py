"""``frame_colorizer``: every whole frame coloured by a DDColor or DeOldify model at ``frame_colorizer.size``, its
own lightness kept (:mod:`workers.colorizing`), then blended over the frame as it came (``frame_colorizer.blend``).

It works on whole frames of the size they were decoded at, so it may sit anywhere in a chain before the
``frame_enhancer`` (which runs last); the faces the face processors work on are detected once, on the frames as
decoded, wherever it sits.
"""

from __future__ import annotations

from workers.colorizing import FrameColorizer, blend
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, register


class FrameColorizerProcessor:
    """Colours each batch of frames.

    Args:
        colorizer: the loaded model, at the job's size.
        blend: percent of the coloured frame over the frame as it came (0–100).
        reporter: checks the model's slower paths after each batch (a compile that fails does so on its first).
    """

    touches_pixels = True

    def __init__(self, colorizer: FrameColorizer, *, blend: int = 100, reporter: Reporter | None = None) -> None:
        self.colorizer = colorizer
        self.blend = blend
        self._reporter = reporter

    @classmethod
    def from_context(cls, context: ProcessorContext) -> FrameColorizerProcessor:
        """Build from a job's context, loading the model through the model registry."""
        options = context.options.frame_colorizer
        colorizer = FrameColorizer.load(options.model, options.size, context.settings)
        return cls(colorizer, blend=options.blend, reporter=Reporter(context.report, colorizer.degradations))

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames coloured: ``[N, H, W, 3]`` → the same shape."""
        coloured = frames if self.blend <= 0 else blend(frames, self.colorizer.colorize(frames), self.blend)
        if self._reporter is not None:
            self._reporter.check()
        return coloured


@register("frame_colorizer")
def _build(context: ProcessorContext) -> FrameColorizerProcessor:
    return FrameColorizerProcessor.from_context(context)
