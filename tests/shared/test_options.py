from __future__ import annotations

import pytest
from pydantic import ValidationError

from shared.options import JobOptions, ProcessorName, choices


def test_presets_fill_only_what_the_caller_left_unset() -> None:
    fast = JobOptions()
    assert fast.face.swapper == "inswapper_128_fp16" and fast.face.enhancer is None
    quality = JobOptions.model_validate({"preset": "quality", "face": {"enhancer": "codeformer"}})
    assert quality.face.swapper == "hyperswap_1a_256"
    assert quality.face.enhancer == "codeformer"


def test_stored_options_round_trip() -> None:
    options = JobOptions.model_validate({"processors": ["passthrough"], "chunk_frames": 90})
    assert JobOptions.model_validate(options.model_dump(mode="json")) == options


@pytest.mark.parametrize(
    "bad",
    [
        {"processors": ["face_melter"]},
        {"processors": []},
        {"chunk_frames": 0},
        {"encoder": {"quality": 101}},
        {"face": {"detector": "haar"}},
        {"unknown": 1},
    ],
)
def test_invalid_options_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        JobOptions.model_validate(bad)


def test_choices_come_from_the_one_definition() -> None:
    assert "passthrough" in choices(ProcessorName)
    assert JobOptions(processors=["face_swapper"]).needs_source
    assert not JobOptions(processors=["face_blur"]).changes_faces
