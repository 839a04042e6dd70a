"""The frame index the planner stores and the stitcher reads: the same times as a scan of the target."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from shared.storage import Storage
from tests.support.media import make_clip
from workers.video import frame_index
from workers.video.frame_scan import frame_times


def test_the_stored_index_gives_back_the_scanned_times(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "vfr.mp4", seconds=2, vfr=True, audio=False)
    times = frame_times(clip, demuxer="mov")
    storage = Storage(str(tmp_path / "store"))
    frame_index.store(storage, "job1", times, tmp_path)
    assert storage.exists(storage.job_url("job1", frame_index.NAME))
    assert frame_index.load(storage, "job1", tmp_path / "not-read.mp4", "mov") == times


def test_a_job_planned_without_an_index_has_its_target_scanned(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "cfr.mp4", seconds=1, audio=False)
    storage = Storage(str(tmp_path / "store"))
    assert frame_index.load(storage, "old-job", clip, "mov") == frame_times(clip, demuxer="mov")


@pytest.mark.parametrize("body", [b"[1, 2]", b'{"times": ["a"]}', b'{"frames": []}'])
def test_anything_but_an_index_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match="not a frame index"):
        frame_index.decode(gzip.compress(body))
