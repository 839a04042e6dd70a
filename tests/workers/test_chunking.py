from __future__ import annotations

import pytest

from shared.options import JobOptions
from shared.settings import Settings
from workers.chunking import PIXEL_FREE, chunk_seconds_for, default_chunk_frames, plan_chunks
from workers.processors import ProcessorContext, build


def test_every_frame_is_in_exactly_one_chunk() -> None:
    times = [i / 30 for i in range(1000)]
    chunks = plan_chunks(times, 90)
    covered = [f for c in chunks for f in range(c.frame_start, c.frame_end)]
    assert covered == list(range(1000))
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_a_short_tail_joins_the_previous_chunk() -> None:
    chunks = plan_chunks([i / 30 for i in range(205)], 100)
    assert [(c.frame_start, c.frame_end) for c in chunks] == [(0, 100), (100, 205)]


def test_seek_lands_between_the_previous_frame_and_the_first() -> None:
    # variable frame intervals: the seek point must fall strictly between frame a-1 and frame a
    times = [0.0, 0.04, 0.1, 0.12, 0.2, 0.26, 0.3]
    for chunk in plan_chunks(times, 2, start_time=0.0)[1:]:
        a = chunk.frame_start
        assert times[a - 1] < chunk.seek_seconds < times[a]


def test_seek_is_relative_to_the_container_start() -> None:
    times = [1.4 + i / 25 for i in range(100)]
    chunk = plan_chunks(times, 50, start_time=1.4)[1]
    assert chunk.seek_seconds == pytest.approx(50 / 25 - 0.02)


def test_default_chunk_is_about_ten_seconds() -> None:
    assert default_chunk_frames(29.97, 10) == 300
    assert default_chunk_frames(25, 10) == 250


def test_no_frames_no_chunks() -> None:
    assert plan_chunks([], 10) == []


def test_cuts_move_to_the_nearest_keyframe_within_half_a_chunk() -> None:
    times = [i / 30 for i in range(1000)]
    keyframes = [0, 250, 480, 700, 990]
    chunks = plan_chunks(times, 300, keyframes=keyframes)
    assert [c.frame_start for c in chunks] == [0, 250, 480, 700]
    assert chunks[-1].frame_end == 1000
    covered = [f for c in chunks for f in range(c.frame_start, c.frame_end)]
    assert covered == list(range(1000))


def test_without_a_keyframe_nearby_the_cut_stays_where_it_was() -> None:
    times = [i / 30 for i in range(900)]
    chunks = plan_chunks(times, 300, keyframes=[0, 10])
    assert [c.frame_start for c in chunks] == [0, 300, 600]


def test_pixel_free_jobs_get_long_chunks_and_face_jobs_the_face_length() -> None:
    settings = Settings(environment="test", chunk_seconds=10, pixel_free_chunk_seconds=60)
    assert chunk_seconds_for(["passthrough"], settings) == 60
    assert chunk_seconds_for(["face_swapper"], settings) == 10
    assert chunk_seconds_for(["passthrough", "face_blur"], settings) == 10
    context = ProcessorContext(options=JobOptions(processors=["passthrough"]), sources=[], settings=settings)
    assert all(build(name, context).touches_pixels is False for name in PIXEL_FREE)


def test_a_tracked_chunk_starts_decoding_exactly_at_its_look_behind() -> None:
    # variable frame intervals: each chunk's lead seek falls strictly between the frame before its look-behind
    # and the look-behind's first frame, so one decoder reads the look-behind, then the chunk's own frames
    times = [0.0, 0.04, 0.1, 0.12, 0.2, 0.26, 0.3, 0.31, 0.4, 0.45, 0.5, 0.58]
    chunks = plan_chunks(times, 4, start_time=0.0, lead=3)
    assert [(c.frame_start, c.lead_frames) for c in chunks] == [(0, 0), (4, 3), (8, 3)]
    assert chunks[0].lead_seek_seconds is None, "nothing before the first frame"
    for chunk in chunks[1:]:
        first = chunk.frame_start - chunk.lead_frames
        assert chunk.lead_seek_seconds is not None
        assert times[first - 1] < chunk.lead_seek_seconds < times[first]


def test_a_look_behind_reaches_before_a_trimmed_range_but_not_before_the_video() -> None:
    times = [i / 25 for i in range(100)]
    chunks = plan_chunks(times, 20, frames=range(2, 60), lead=5)
    assert [(c.frame_start, c.lead_frames) for c in chunks] == [(2, 2), (22, 5), (42, 5)]
    assert chunks[0].lead_seek_seconds == 0.0
    assert chunks[1].lead_seek_seconds == pytest.approx(17 / 25 - 0.02)
    assert all(c.lead_frames == 0 and c.lead_seek_seconds is None for c in plan_chunks(times, 20))
