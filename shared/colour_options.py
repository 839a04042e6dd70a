"""Options of the ``frame_colorizer`` processor (part of :class:`shared.options.JobOptions`, re-exported there)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Whole-frame colourisers (FaceFusion's frame_colorizer_model): DDColor and DeOldify.
FrameColorizerModel = Literal["ddcolor", "ddcolor_artistic", "deoldify", "deoldify_artistic", "deoldify_stable"]
# The square side frames are fed to the colouriser at (FaceFusion's frame_colorizer_size choices).
FrameColorizerSize = Literal[192, 256, 384, 512]


class FrameColorizerOptions(BaseModel):
    """Options of the ``frame_colorizer`` processor: each whole frame coloured by a DDColor or DeOldify model, its
    own lightness kept."""

    model_config = ConfigDict(extra="forbid")

    model: FrameColorizerModel = Field("ddcolor", description="The colouriser (FaceFusion's frame_colorizer_model)")
    size: FrameColorizerSize = Field(
        256,
        description="The square side the frame is fed to the model at; the colour it gives is resized back to the "
        "frame, whose own lightness is kept (FaceFusion's frame_colorizer_size)",
    )
    blend: int = Field(
        100,
        ge=0,
        le=100,
        description="Percent of the coloured frame over the frame as it came (FaceFusion's frame_colorizer_blend)",
    )
