"""Trim ranges, output sizes and rates: what a job's options make of a video's frames (pure functions)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from pydantic import ValidationError

from shared.errors import InvalidOptionsError, MediaLimitError
from shared.limits import MediaLimits
from shared.options import JobOptions
from shared.output_frames import (
    FrameRange,
    RenderSizes,
    check_chain,
    check_trim,
    frame_range,
    output_rate,
    output_size,
    render_sizes,
    resampled_frames,
)
from workers.chunking import plan_chunks


def check_output_size(width: int, height: int, options: JobOptions, max_pixels: int) -> None:
    """The output size limit alone (``shared.limits``), for one frame."""
    limits = MediaLimits(
        max_duration_seconds=1e9, max_frame_pixels=max_pixels, max_frames=10**9, max_output_pixels=10**18
    )
    limits.check_output(width, height, options, frames=1, seconds=1)


def test_frames_50_to_149_are_start_50_end_150_and_100_frames() -> None:
    kept = frame_range(JobOptions(trim_start_frame=50, trim_end_frame=150), 216)
    assert kept == FrameRange(50, 150) and kept.count == 100


def test_an_open_range_runs_to_the_ends_of_the_video() -> None:
    assert frame_range(JobOptions(), 216) == FrameRange(0, 216)
    assert frame_range(JobOptions(trim_start_frame=200), 216) == FrameRange(200, 216)
    assert frame_range(JobOptions(trim_end_frame=216), 216) == FrameRange(0, 216)


@pytest.mark.parametrize(
    ("options", "field"),
    [({"trim_start_frame": 216}, "trim_start_frame"), ({"trim_end_frame": 217}, "trim_end_frame")],
)
def test_a_range_past_the_last_frame_is_refused_naming_the_option(options: dict[str, int], field: str) -> None:
    with pytest.raises(InvalidOptionsError) as refused:
        frame_range(JobOptions.model_validate(options), 216)
    assert refused.value.code == "trim_out_of_range" and refused.value.message.startswith(field)
    assert "216 frames" in refused.value.message


@pytest.mark.parametrize(("start", "end"), [(50, 50), (150, 50)])
def test_a_range_that_ends_where_it_starts_or_before_is_invalid_options(start: int, end: int) -> None:
    options = JobOptions(trim_start_frame=start, trim_end_frame=end)  # the schema cannot say it: the check can
    for total in (216, None):
        with pytest.raises(InvalidOptionsError) as refused:
            check_trim(options, total)
        assert refused.value.code == "options_invalid" and refused.value.message.startswith("trim_end_frame")
    with pytest.raises(InvalidOptionsError):
        frame_range(options, 216)


def test_a_range_is_checked_against_the_frames_only_where_their_count_is_known() -> None:
    check_trim(JobOptions(trim_start_frame=500), None)
    with pytest.raises(InvalidOptionsError, match="216 frames"):
        check_trim(JobOptions(trim_start_frame=500), 216)


@pytest.mark.parametrize(
    ("size", "height", "expected"),
    [((1920, 1080), 720, (1280, 720)), ((480, 480), 240, (240, 240)), ((1280, 536), 360, (860, 360)),
     ((720, 1280), 640, (360, 640)), ((1920, 1080), None, (1920, 1080)), ((100, 1000), 16, (2, 16))],
)  # fmt: skip
def test_the_output_keeps_the_aspect_with_an_even_width(
    size: tuple[int, int], height: int | None, expected: tuple[int, int]
) -> None:
    width, out_height = output_size(*size, height)
    assert (width, out_height) == expected
    if height is not None:
        assert width % 2 == 0 and out_height % 2 == 0


def test_an_odd_or_tiny_output_height_is_invalid_options() -> None:
    for height in (241, 8, 10_000):
        with pytest.raises(ValidationError, match="output_height"):
            JobOptions(output_height=height)


def test_an_output_over_the_pixel_limit_is_refused() -> None:
    check_output_size(1920, 1080, JobOptions(output_height=1080), 1920 * 1080)
    with pytest.raises(MediaLimitError) as refused:
        check_output_size(1920, 1080, JobOptions(output_height=2160), 1920 * 1080)
    assert refused.value.code == "resolution_too_large" and "3840x2160" in refused.value.message


def test_ntsc_rates_are_exact_and_others_as_written() -> None:
    assert output_rate(29.97) == Fraction(30000, 1001)
    assert output_rate(23.976) == Fraction(24000, 1001)
    assert output_rate(25) == 25 and output_rate(12.5) == Fraction(25, 2)


@pytest.mark.parametrize(
    ("rate", "frames"), [(15, 50), (12, 40), (25, 83), (29.97, 100), (60, 200), (7, 23), (3.15, 11), (1, 3)]
)
def test_resampling_counts_the_frames_the_fps_filter_gives(rate: float, frames: int) -> None:
    # 100 frames at 30 fps, counted with FFmpeg's fps filter at each rate
    assert resampled_frames(Fraction(100, 30), rate) == frames


def test_a_trimmed_plan_covers_the_range_exactly_once_and_seeks_to_its_first_frame() -> None:
    times = [i / 30 for i in range(216)]
    chunks = plan_chunks(times, 30, 0.0, keyframes=list(range(0, 216, 48)), frames=range(50, 150))
    covered = [f for c in chunks for f in range(c.frame_start, c.frame_end)]
    assert covered == list(range(50, 150))
    first = chunks[0]
    assert first.seek_seconds == pytest.approx(50 / 30 - 1 / 60)
    assert all(times[c.frame_start - 1] < c.seek_seconds < times[c.frame_start] for c in chunks)


def test_a_range_outside_the_frames_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match="not a range"):
        plan_chunks([i / 30 for i in range(10)], 5, frames=range(5, 11))


def test_the_frame_enhancer_multiplies_the_output_and_output_height_stays_the_outputs_height() -> None:
    """×2 on d18's 480² gives 960²; with output_height the frames are decoded at a 1/scale of it."""
    x2 = JobOptions(processors=["face_blur", "frame_enhancer"])
    assert render_sizes(480, 480, x2) == RenderSizes(decoded=(480, 480), output=(960, 960))
    x4 = JobOptions(processors=["frame_enhancer"], frame_enhancer={"model": "real_esrgan_x4"}, output_height=720)
    assert render_sizes(1920, 1080, x4) == RenderSizes(decoded=(320, 180), output=(1280, 720))
    assert render_sizes(1920, 1080, JobOptions(output_height=720)).output == (1280, 720)  # no enhancer: as before
    with pytest.raises(MediaLimitError, match="3840x2160"):
        check_output_size(1920, 1080, JobOptions(processors=["frame_enhancer"]), 1920 * 1080)


def test_the_frame_enhancer_is_refused_before_another_processor_or_with_an_output_height_off_its_scale() -> None:
    check_chain(JobOptions(processors=["face_swapper", "frame_enhancer"], output_height=720))
    with pytest.raises(InvalidOptionsError, match="frame_enhancer must be the last processor"):
        check_chain(JobOptions(processors=["frame_enhancer", "face_blur"]))
    x4 = JobOptions(processors=["frame_enhancer"], frame_enhancer={"model": "real_esrgan_x4"}, output_height=722)
    with pytest.raises(InvalidOptionsError, match=r"multiple of 4 .* 720 or 724") as refused:
        check_chain(x4)
    assert refused.value.code == "options_invalid"
