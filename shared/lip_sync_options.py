"""Options of the ``lip_syncer`` processor (part of :class:`shared.options.JobOptions`, re-exported there)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The mouth-syncing models of ``lip_syncer`` (FaceFusion's lip_syncer_model).
LipSyncerModel = Literal["wav2lip_gan_96", "wav2lip_96", "edtalk_256"]


class LipSyncerOptions(BaseModel):
    """Options of the ``lip_syncer`` processor: the faces' mouths follow the job's source audio."""

    model_config = ConfigDict(extra="forbid")

    model: LipSyncerModel = Field("wav2lip_gan_96", description="The lip-sync model (FaceFusion's lip_syncer_model)")
    weight: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        multiple_of=0.05,
        description="How strongly the mouth follows the audio (FaceFusion's lip_syncer_weight). A frame whose audio "
        "window is silent keeps its own mouth, as in FaceFusion",
    )
    voice_extractor: bool = Field(
        True, description="Extract the voice from the source audio before the mel spectrogram (kim_vocal_2)"
    )
    keep_target_audio: bool = Field(
        False, description="Mix the target's own audio under the source audio, ducked; off: the target's is dropped"
    )
