"""Options of the ``frame_enhancer`` processor (part of :class:`shared.options.JobOptions`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FrameEnhancerModel = Literal["real_esrgan_x2", "real_esrgan_x2_fp16", "real_esrgan_x4", "real_esrgan_x4_fp16"]

# How many times each frame enhancer multiplies a frame's width and height (the model registry agrees: a test checks).
FRAME_ENHANCER_SCALES: dict[FrameEnhancerModel, int] = {
    "real_esrgan_x2": 2,
    "real_esrgan_x2_fp16": 2,
    "real_esrgan_x4": 4,
    "real_esrgan_x4_fp16": 4,
}


class FrameEnhancerOptions(BaseModel):
    """Options of the ``frame_enhancer`` processor: the whole frame upscaled by a Real-ESRGAN model."""

    model_config = ConfigDict(extra="forbid")

    model: FrameEnhancerModel = Field(
        "real_esrgan_x2", description="The upscaler; its scale (x2, x4) multiplies the output's width and height"
    )
    blend: int = Field(
        80,
        ge=0,
        le=100,
        description="Percent of the upscaled frame over the input resized to the same size "
        "(FaceFusion's frame_enhancer_blend)",
    )
