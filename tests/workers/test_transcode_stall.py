"""The one-process render path (transcode) stops a decoder that makes no progress, as the pipes do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.errors import FfmpegError
from shared.jobs import ChunkClaim
from shared.media import MediaInfo
from shared.options import JobOptions
from workers.leases import Heartbeat
from workers.rendering import _transcode


def test_a_transcode_that_gives_no_frame_is_stopped_after_the_stall_timeout(tmp_path: Path) -> None:
    fifo = tmp_path / "stalled.ts"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # held open, never written: ffmpeg waits for data forever
    media = MediaInfo(
        width=64, height=64, fps="30/1", duration=1.0, frame_count=None, video_codec="h264", pix_fmt="yuv420p",
        rotation=0, start_time=0.0, has_audio=False, audio_codec=None, container="mpegts",
    )  # fmt: skip
    claim = ChunkClaim("c", "j", "token", 0, 0, 30, 0.0, 1)
    try:
        with Heartbeat(lambda: True, 60, "c") as beat, pytest.raises(FfmpegError) as stalled:
            _transcode(
                claim, media, JobOptions(processors=["passthrough"]), fifo, tmp_path / "out.mp4", [0], beat,
                stall_seconds=1,
            )  # fmt: skip
        assert stalled.value.code == "chunk_stalled"
    finally:
        os.close(writer)
