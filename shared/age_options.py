"""Options of the ``age_modifier`` processor (part of :class:`shared.options.JobOptions`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The age models (FaceFusion's age_modifier_model): fran (FRAN, ry-lu) and StyleGANEX's age editor.
AgeModifierModel = Literal["fran", "styleganex_age"]


class AgeModifierOptions(BaseModel):
    """Options of the ``age_modifier`` processor: the selected faces made older or younger."""

    model_config = ConfigDict(extra="forbid")

    model: AgeModifierModel = Field(
        "fran",
        description="The age model (FaceFusion's age_modifier_model): fran takes each face's FairFace age and the "
        "years to add; styleganex_age a direction alone",
    )
    direction: int = Field(
        0,
        ge=-100,
        le=100,
        description="Older (positive) or younger (negative) (FaceFusion's age_modifier_direction): with fran, years "
        "added to the face's FairFace age (clipped to 0-100); with styleganex_age, the strength of its age edit",
    )
