from __future__ import annotations

from typing import get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError

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


def test_processors_are_each_given_once_and_at_most_a_handful() -> None:
    with pytest.raises(ValidationError, match="at most once"):
        JobOptions.model_validate({"processors": ["face_blur", "face_blur"]})
    with pytest.raises(ValidationError):
        JobOptions.model_validate({"processors": ["passthrough"] * 1000})


def _numbers(model: type[BaseModel]) -> list[tuple[str, object]]:
    """Every numeric field of ``model`` and the models it holds, with its annotation's metadata."""
    found: list[tuple[str, object]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found += [(f"{name}.{inner}", meta) for inner, meta in _numbers(annotation)]
        elif annotation in (int, float, int | None, float | None):
            found.append((name, info.metadata))
        elif get_origin(annotation) is tuple:
            found += [(f"{name}[]", get_args(arg)[1:] if get_args(arg) else ()) for arg in get_args(annotation)]
    return found


def test_every_number_a_job_can_set_is_bounded_above_and_below() -> None:
    for name, metadata in _numbers(JobOptions):
        text = repr(metadata)
        assert ("ge=" in text or "gt=" in text) and ("le=" in text or "lt=" in text), f"{name} is unbounded: {text}"
    with pytest.raises(ValidationError):
        JobOptions.model_validate({"face": {"mask_padding": [0, 0, 10**9, 0]}})
