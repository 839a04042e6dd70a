"""``passthrough``: frames out as they came in. Measures the farm's own overhead (decode, encode, stitch)."""

from __future__ import annotations

from workers.processors.base import FrameBatch, ProcessorContext, register


class Passthrough:
    touches_pixels = False

    def process(self, frames: FrameBatch) -> FrameBatch:
        return frames


@register("passthrough")
def _build(context: ProcessorContext) -> Passthrough:
    return Passthrough()
