"""A preview's frames cut out of the planner's chunks: every frame still in exactly one chunk, in order."""

from __future__ import annotations

import pytest

from workers.chunking import plan_chunks
from workers.previews import preview_frames, split


def test_preview_frames_are_spread_over_the_range_and_distinct() -> None:
    assert preview_frames(range(100), 5) == [10, 30, 50, 70, 90]
    assert preview_frames(range(50, 60), 2) == [52, 57]
    assert preview_frames(range(10, 13), 5) == [10, 11, 12]
    assert preview_frames(range(10), 0) == [] and preview_frames(range(0), 3) == []


def test_split_makes_one_frame_chunks_of_the_preview_and_keeps_every_frame_once_in_order() -> None:
    times = [i / 30 for i in range(48)]
    chunks = plan_chunks(times, 8)
    picked = preview_frames(range(48), 5)
    out = split(chunks, picked, times, 0.0)
    assert [c.index for c in out] == list(range(len(out)))
    assert [f for c in out for f in range(c.frame_start, c.frame_end)] == list(range(48))
    assert [c.frame_start for c in out if c.preview] == picked
    assert all(c.frame_end - c.frame_start == 1 for c in out if c.preview)
    for c in out:  # a piece seeks as the planner's rule says: half a frame before its first frame
        assert c.seek_seconds == pytest.approx(0.0 if c.frame_start == 0 else times[c.frame_start] - 1 / 60)


def test_a_preview_frame_at_a_chunk_boundary_and_a_tracked_jobs_lead_are_kept() -> None:
    times = [i / 30 for i in range(40)]
    chunks = plan_chunks(times, 10, lead=3)
    out = split(chunks, [10, 25], times, 0.0)
    assert [(c.frame_start, c.frame_end, c.preview) for c in out] == [
        (0, 10, False), (10, 11, True), (11, 20, False), (20, 25, False), (25, 26, True), (26, 30, False),
        (30, 40, False),
    ]  # fmt: skip
    assert [c.lead_frames for c in out] == [0, 3, 3, 3, 3, 3, 3]
    assert out[1].lead_seek_seconds == pytest.approx(times[7] - 1 / 60)
