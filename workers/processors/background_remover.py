"""``background_remover``: every whole frame's background found by a matting model (:mod:`workers.matting`), filled
with ``background_remover.fill_colour`` and despilled of ``despill_colour``; with ``transparent`` the matte also
travels beside the frames to the encoder as their alpha (:class:`~workers.processors.base.Matting`).

It works on whole frames at the size they were decoded at, so it may sit anywhere in a chain before the
``frame_enhancer`` (``shared.background_options.check_background_remover``); the faces the face processors work on
are detected once, on the frames as decoded, wherever it sits.
"""

from __future__ import annotations

from shared.background_options import rgba
from workers.matting import BackgroundRemover, Frames, Mattes
from workers.processors.base import FrameBatch, ProcessorContext, Reporter, register


class BackgroundRemoverProcessor:
    """Removes the background of each batch of frames.

    Args:
        remover: the loaded model.
        fill_colour, despill_colour: R G B A, as FaceFusion reads them (1 to 4 values).
        transparent: give the matte as the frames' alpha (``gives_alpha``).
        reporter: checks the model's slower paths after each batch (a compile that fails does so on its first).
    """

    touches_pixels = True

    def __init__(
        self,
        remover: BackgroundRemover,
        *,
        fill_colour: list[int] | tuple[int, ...] = (0, 0, 0, 255),
        despill_colour: list[int] | tuple[int, ...] = (0, 0, 0, 0),
        transparent: bool = False,
        reporter: Reporter | None = None,
    ) -> None:
        self.remover = remover
        self.fill_colour, self.despill_colour = rgba(fill_colour), rgba(despill_colour)
        self.gives_alpha = transparent
        self._reporter = reporter

    @classmethod
    def from_context(cls, context: ProcessorContext) -> BackgroundRemoverProcessor:
        """Build from a job's context, loading the model through the model registry."""
        options = context.options.background_remover
        remover = BackgroundRemover.load(options.model, context.settings)
        return cls(
            remover, fill_colour=options.fill_colour, despill_colour=options.despill_colour,
            transparent=options.transparent, reporter=Reporter(context.report, remover.degradations),
        )  # fmt: skip

    def cut_out(self, frames: FrameBatch) -> tuple[Frames, Mattes]:
        """The frames filled and despilled, and their mattes: ``[N, H, W, 3]`` → (the same, uint8 ``[N, H, W]``)."""
        result = self.remover.cut_out(frames, fill_colour=self.fill_colour, despill_colour=self.despill_colour)
        if self._reporter is not None:
            self._reporter.check()
        return result

    def process(self, frames: FrameBatch) -> FrameBatch:
        """The frames filled and despilled (the matte dropped): ``[N, H, W, 3]`` → the same shape."""
        return self.cut_out(frames)[0]


@register("background_remover")
def _build(context: ProcessorContext) -> BackgroundRemoverProcessor:
    return BackgroundRemoverProcessor.from_context(context)
