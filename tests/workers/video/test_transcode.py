"""The one-process render path (transcode) stops a decoder that makes no progress, as the pipes do."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shared.errors import FfmpegError, LeaseLostError
from shared.options import EncoderOptions
from workers.video.transcode import Span, transcode


def test_a_transcode_that_gives_no_frame_is_stopped_after_the_stall_timeout(tmp_path: Path) -> None:
    fifo = tmp_path / "stalled.ts"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # held open, never written: ffmpeg waits for data forever
    span = Span(fifo, 0.0, 30, 64, 64, "30/1", demuxer="mpegts")
    try:
        with pytest.raises(FfmpegError) as stalled:
            transcode(span, tmp_path / "out.mp4", EncoderOptions(), [0], alive=lambda: True, what="c", stall_seconds=1)
        assert stalled.value.code == "chunk_stalled"
    finally:
        os.close(writer)


def test_a_transcode_whose_owner_lets_go_is_stopped(tmp_path: Path) -> None:
    fifo = tmp_path / "held.ts"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)
    span = Span(fifo, 0.0, 30, 64, 64, "30/1", demuxer="mpegts")
    try:
        with pytest.raises(LeaseLostError):
            transcode(span, tmp_path / "out.mp4", EncoderOptions(), [0], alive=lambda: False, what="c")
    finally:
        os.close(writer)
