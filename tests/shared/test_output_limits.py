"""What a job will write, counted from its options, and refused past the limits (``shared.limits``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.errors import MediaLimitError
from shared.limits import MediaLimits
from shared.media import MediaInfo
from shared.options import JobOptions
from shared.output_frames import JobOutput

CLIP = MediaInfo(
    width=64, height=36, fps="1/1", duration=20.0, frame_count=20, video_codec="h264", pix_fmt="yuv420p",
    rotation=0, start_time=0.0, has_audio=False, audio_codec=None, container="mov,mp4,m4a,3gp,3g2,mj2",
)  # fmt: skip
LIMITS = MediaLimits(
    max_duration_seconds=4 * 3600, max_frame_pixels=7680 * 4320, max_frames=100, max_output_pixels=10**12
)


def test_the_issues_example_is_4800_frames_of_8k_and_refused() -> None:
    options = JobOptions(output_fps=240, output_height=4320)
    with pytest.raises(MediaLimitError) as refused:
        LIMITS.check_submitted(CLIP, options)
    assert refused.value.code == "too_many_frames" and "4800 frames" in refused.value.message
    wider = replace(LIMITS, max_frames=5000)
    assert wider.check_submitted(CLIP, options) == JobOutput(4800, 7680, 4320)


@pytest.mark.parametrize(
    ("options", "output"),
    [
        (JobOptions(), JobOutput(20, 64, 36)),
        (JobOptions(trim_start_frame=5, trim_end_frame=15), JobOutput(10, 64, 36)),
        (JobOptions(trim_start_frame=10, output_fps=10), JobOutput(100, 64, 36)),  # at the limit, not over
        (JobOptions(output_height=360), JobOutput(20, 640, 360)),
        (
            JobOptions(processors=["frame_enhancer"], frame_enhancer={"model": "real_esrgan_x4"}),
            JobOutput(20, 256, 144),
        ),
    ],
    ids=["as-is", "trimmed", "trimmed-and-resampled", "output-height", "enhancer-x4"],
)
def test_what_a_job_writes_follows_its_trim_rate_height_and_enhancer(options: JobOptions, output: JobOutput) -> None:
    assert LIMITS.check_submitted(CLIP, options) == output


def test_a_header_without_a_frame_count_is_judged_by_its_duration_times_its_rate() -> None:
    uncounted = replace(CLIP, frame_count=None, duration=30.0)
    with pytest.raises(MediaLimitError, match="300 frames"):
        LIMITS.check_submitted(uncounted, JobOptions(output_fps=10))


def test_pixels_are_limited_per_frame_and_per_job() -> None:
    per_frame = replace(LIMITS, max_frame_pixels=640 * 360 - 1)
    with pytest.raises(MediaLimitError, match="pixels a frame") as frame:
        per_frame.check_submitted(CLIP, JobOptions(output_height=360))
    per_job = replace(LIMITS, max_output_pixels=20 * 640 * 360 - 1)
    with pytest.raises(MediaLimitError, match="pixels a job") as job:
        per_job.check_submitted(CLIP, JobOptions(output_height=360))
    assert frame.value.code == job.value.code == "resolution_too_large"
    assert replace(LIMITS, max_output_pixels=20 * 640 * 360).check_submitted(CLIP, JobOptions(output_height=360))
