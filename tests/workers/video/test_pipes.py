"""Frames through real ffmpeg pipes: BGR out of the reader, BGR into the writer, exact counts, clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from shared.errors import FfmpegError
from shared.options import EncoderOptions, VideoEncoder, choices
from tests.support.hostile import corrupt_h264, stderr_bytes_of_decoding
from tests.support.media import make_clip, psnr, read_frames
from workers.video.encoders import CANDIDATE_ENCODERS, SOFTWARE_FALLBACK
from workers.video.pipes import FrameReader, FrameWriter, split_frames

SOFTWARE_ENCODERS = [e for e in choices(VideoEncoder) if e not in SOFTWARE_FALLBACK and e not in CANDIDATE_ENCODERS]


@pytest.mark.parametrize("size", ["320x180", "321x181"])  # 4:2:0 pipe, and BGR for odd sizes
def test_reader_gives_bgr_frames_matching_ffmpegs_own_decode(tmp_path: Path, size: str) -> None:
    chroma = "yuv444p" if size.endswith("1") else "yuv420p"
    width, height = (int(v) for v in size.split("x"))
    clip = make_clip(tmp_path / "c.mp4", seconds=2, size=size, audio=False, extra=["-pix_fmt", chroma])
    reference = read_frames(clip)[..., ::-1]  # RGB → BGR
    with FrameReader(clip, seek_seconds=0, frames=len(reference), width=width, height=height, batch_size=7) as reader:
        frames = np.concatenate(list(reader))
    assert frames.shape == reference.shape and frames.dtype == np.uint8
    assert min(psnr(a, b) for a, b in zip(frames, reference, strict=True)) > 35


def test_writer_then_reader_round_trips_frames(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c.mp4", seconds=1, size="320x180", audio=False)
    frames = read_frames(clip)[..., ::-1].copy()
    writer = FrameWriter(tmp_path / "o.mp4", width=320, height=180, fps="30/1", options=EncoderOptions(lossless=True))
    for start in range(0, len(frames), 8):
        writer.write(frames[start : start + 8])
    writer.close()
    assert writer.frames_written == len(frames)
    with FrameReader(tmp_path / "o.mp4", seek_seconds=0, frames=len(frames), width=320, height=180, batch_size=8) as r:
        back = np.concatenate(list(r))
    # what is lost is 4:2:0 chroma subsampling of saturated test colours, once
    assert min(psnr(a, b) for a, b in zip(back, frames, strict=True)) > 30
    assert all(psnr(back[i], frames[i]) > psnr(back[i], frames[i + 1]) for i in range(len(frames) - 1))


@pytest.mark.parametrize("encoder", SOFTWARE_ENCODERS)
def test_every_software_encoder_a_job_may_ask_for_encodes_every_frame(tmp_path: Path, encoder: VideoEncoder) -> None:
    # Each hardware encoder a job may ask for has a software stand-in (probed at start: workers.video.codecs).
    assert set(choices(VideoEncoder)) - set(SOFTWARE_ENCODERS) <= set(SOFTWARE_FALLBACK)
    frames = read_frames(make_clip(tmp_path / "c.mp4", seconds=0.2, size="64x64", audio=False))[..., ::-1].copy()
    writer = FrameWriter(tmp_path / "o.mp4", width=64, height=64, fps="30/1", options=EncoderOptions(encoder=encoder))
    writer.write(frames)
    writer.close()
    with FrameReader(tmp_path / "o.mp4", seek_seconds=0, frames=len(frames), width=64, height=64, batch_size=8) as r:
        back = np.concatenate(list(r))
    assert len(back) == len(frames) == 6
    assert min(psnr(a, b) for a, b in zip(back, frames, strict=True)) > 20


def test_a_file_shorter_than_asked_is_an_error_not_a_short_chunk(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c.mp4", seconds=1, size="320x180", audio=False)
    reader = FrameReader(clip, seek_seconds=0, frames=100, width=320, height=180, batch_size=8)
    with reader, pytest.raises(FfmpegError) as info:
        list(reader)
    assert info.value.code == "media_truncated"
    assert "30 of 100" in info.value.message


def test_the_writer_refuses_frames_of_another_size(tmp_path: Path) -> None:
    writer = FrameWriter(tmp_path / "o.mp4", width=320, height=180, fps="30/1", options=EncoderOptions())
    with pytest.raises(ValueError, match="shape"):
        writer.write(np.zeros((1, 100, 100, 3), np.uint8))
    writer.abort()


def test_an_encoder_that_dies_is_reported_with_its_own_error_not_a_broken_pipe(tmp_path: Path) -> None:
    # ffmpeg cannot open this output: it exits after the first frame, and the writer's next write finds no reader
    writer = FrameWriter(tmp_path / "missing" / "o.mp4", width=64, height=64, fps="30/1", options=EncoderOptions())
    frames = np.zeros((8, 64, 64, 3), np.uint8)
    with pytest.raises(FfmpegError) as info:
        try:
            for _ in range(50):
                writer.write(frames)
            writer.close()
        finally:
            writer.abort()
    assert "No such file or directory" in info.value.message


def test_a_decoder_that_gives_no_frame_is_stopped_after_the_stall_timeout(tmp_path: Path) -> None:
    # A FIFO whose writer sends nothing: ffmpeg opens it and waits for data forever, as on a stalled stream.
    fifo = tmp_path / "stalled.ts"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # holds the FIFO open without writing
    try:
        reader = FrameReader(
            fifo, seek_seconds=0, frames=10, width=64, height=64, batch_size=4, demuxer="mpegts", stall_seconds=1
        )
        with reader, pytest.raises(FfmpegError) as stalled:
            list(reader)
        assert stalled.value.code == "chunk_stalled"
        assert reader._proc is not None and reader._proc.poll() is not None, "the stalled decoder was killed"
    finally:
        os.close(writer)


def test_a_decoder_flooding_its_stderr_still_delivers_every_frame(tmp_path: Path) -> None:
    clip = corrupt_h264(tmp_path / "corrupt.mp4", seconds=4)
    assert stderr_bytes_of_decoding(clip) > 256 * 1024, "the test needs a decoder that floods its stderr"
    with FrameReader(clip, seek_seconds=0, frames=120, width=1280, height=720, batch_size=8, stall_seconds=60) as r:
        assert sum(len(batch) for batch in r) == 120


def test_one_decoders_frames_split_into_a_look_behind_and_the_rest() -> None:
    batches = [np.arange(i, i + 3) for i in range(0, 9, 3)]  # frames 0..8 in batches of three
    head, tail = split_frames(batches, 4)
    assert [b.tolist() for b in head] == [[0, 1, 2], [3]]
    assert [b.tolist() for b in tail] == [[4, 5], [6, 7, 8]]
    head, tail = split_frames(batches, 4)
    assert [b.tolist() for b in tail] == [[4, 5], [6, 7, 8]], "a look-behind left unread is skipped, never output"
    head, tail = split_frames(batches, 0)
    assert list(head) == [] and [b.tolist() for b in tail] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
