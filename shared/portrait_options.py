"""Options of the two LivePortrait processors, ``expression_restorer`` and ``face_editor`` (part of
:class:`shared.options.JobOptions`, re-exported there); where they may sit in a chain is
:mod:`shared.processor_order`'s."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# The parts of the face whose expression the restorer brings back (FaceFusion's expression_restorer_areas).
ExpressionArea = Literal["upper-face", "lower-face"]

_ALL_AREAS: list[ExpressionArea] = ["upper-face", "lower-face"]

# One face_editor control: -1…1 in steps of 0.05 (FaceFusion's ranges); at 0 it moves nothing.
EditAmount = Annotated[float, Field(ge=-1.0, le=1.0, multiple_of=0.05)]


class ExpressionRestorerOptions(BaseModel):
    """Options of the ``expression_restorer`` processor: the face's expression as decoded, put back over what the
    processors before it made of the face (after a swap: the swapped face with the filmed face's expression)."""

    model_config = ConfigDict(extra="forbid")

    factor: int = Field(
        80,
        ge=0,
        le=100,
        description="How much of the decoded frame's expression comes back: 0 none, 100 all of it and a little "
        "more (1.2 times, as FaceFusion's expression_restorer_factor)",
    )
    areas: list[ExpressionArea] = Field(
        default_factory=lambda: _ALL_AREAS.copy(),
        min_length=1,
        max_length=2,
        json_schema_extra={"uniqueItems": True},
        description="The parts of the face whose expression comes back (FaceFusion's expression_restorer_areas); "
        "the others keep the expression the face has when the restorer runs",
    )

    @field_validator("areas")
    @classmethod
    def _distinct(cls, areas: list[ExpressionArea]) -> list[ExpressionArea]:
        if len(set(areas)) != len(areas):
            raise ValueError(f"each area at most once; got {areas}")
        return areas


class FaceEditorOptions(BaseModel):
    """Options of the ``face_editor`` processor: each control (FaceFusion's face_editor_<name>) moves LivePortrait's
    keypoints of the face by FaceFusion's table; at 0 it moves nothing (the face is still redrawn)."""

    model_config = ConfigDict(extra="forbid")

    eyebrow_direction: EditAmount = Field(0.0, description="The eyebrows moved one way (> 0) or the other (< 0)")
    eye_gaze_horizontal: EditAmount = Field(0.0, description="The gaze moved sideways, the sign picks the way")
    eye_gaze_vertical: EditAmount = Field(0.0, description="The gaze moved up or down, the sign picks the way")
    eye_open_ratio: EditAmount = Field(0.0, description="The eyes opened (> 0) or closed (< 0), by the eye retargeter")
    lip_open_ratio: EditAmount = Field(0.0, description="The lips opened (> 0) or closed (< 0), by the lip retargeter")
    mouth_grim: EditAmount = Field(0.0, description="A grim mouth (> 0), or the opposite move (< 0)")
    mouth_pout: EditAmount = Field(0.0, description="The lips pouted (> 0), or the opposite move (< 0)")
    mouth_purse: EditAmount = Field(0.0, description="The lips pursed (> 0), or the opposite move (< 0)")
    mouth_smile: EditAmount = Field(0.0, description="A smile (> 0), or the opposite move (< 0)")
    mouth_position_horizontal: EditAmount = Field(0.0, description="The mouth moved sideways, the sign picks the way")
    mouth_position_vertical: EditAmount = Field(0.0, description="The mouth moved up or down, the sign picks the way")
    head_pitch: EditAmount = Field(0.0, description="The head's pitch: -20 degrees at 1, +20 at -1")
    head_yaw: EditAmount = Field(0.0, description="The head's yaw: -60 degrees at 1, +60 at -1")
    head_roll: EditAmount = Field(0.0, description="The head's roll: +15 degrees at 1, -15 at -1")
