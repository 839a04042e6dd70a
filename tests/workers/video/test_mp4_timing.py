"""The stitcher's MP4 retiming, on files made with ffmpeg: chunks encoded at a constant rate, as the farm does."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.media import probe
from tests.support.media import assert_frames_match, make_clip, read_frames
from workers.video import mp4_timing
from workers.video.frame_scan import frame_times
from workers.video.mp4_timing import Mp4TimingError, follows_rate, plan_timing, retime_video, to_ticks


def _ffmpeg(*args: str) -> None:
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], check=True)


def _constant_rate(source: Path, output: Path, fps: str, *, b_frames: bool = True, faststart: bool = False) -> Path:
    """``source``'s frames (all of them, as decoded) encoded at a constant ``fps``, like a render chunk."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(source), "-map", "0:v:0", "-fps_mode", "passthrough",
         "-f", "rawvideo", "-pix_fmt", "yuv420p", "pipe:1"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    media = probe(source)
    args = ["-f", "rawvideo", "-pix_fmt", "yuv420p", "-s", f"{media.width}x{media.height}", "-r", fps, "-i", "-"]
    args += ["-c:v", "libx264", "-preset", "medium", "-crf", "18", *([] if b_frames else ["-bf", "0"])]
    args += [*(["-movflags", "+faststart"] if faststart else []), "-f", "mp4", str(output)]
    subprocess.run(["ffmpeg", "-v", "error", "-y", *args], input=raw, check=True)
    return output


def _worst(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _tick(path: Path) -> float:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=time_base", "-of", "csv=p=0",
         str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    num, den = out.strip().split("/")
    return int(num) / int(den)


@pytest.fixture(scope="module")
def vfr(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("vfr") / "vfr.mp4", seconds=2, audio=False, vfr=True)


def test_a_constant_rate_clip_follows_its_rate_and_a_variable_one_does_not(tmp_path: Path, vfr: Path) -> None:
    cfr = make_clip(tmp_path / "cfr.mp4", seconds=2, rate="30000/1001", audio=False)
    assert follows_rate(frame_times(cfr), probe(cfr).fps)
    assert not follows_rate(frame_times(vfr), probe(vfr).fps)
    assert follows_rate([i * 0.033 + (0.0005 if i % 2 else 0) for i in range(100)], "1000/33")  # ms rounding
    assert not follows_rate([0.0, 0.1, 0.2], "5")


@pytest.mark.parametrize("b_frames", [True, False], ids=["b-frames", "no-b-frames"])
def test_a_variable_rate_clip_gets_its_frame_times_back(tmp_path: Path, vfr: Path, b_frames: bool) -> None:
    times = frame_times(vfr)
    video = _constant_rate(vfr, tmp_path / "chunk.mp4", probe(vfr).fps, b_frames=b_frames)
    assert _worst(frame_times(video), times) > 0.02  # at the average rate the frames move
    retime_video(video, times)
    assert _worst(frame_times(video), times) <= _tick(video)
    final = tmp_path / "final.mp4"
    _ffmpeg("-i", str(video), "-c", "copy", "-movflags", "+faststart", str(final))
    assert _worst(frame_times(final), times) <= _tick(final)
    assert_frames_match(read_frames(final), read_frames(vfr))


def test_a_constant_rate_clip_keeps_its_times(tmp_path: Path) -> None:
    cfr = make_clip(tmp_path / "cfr.mp4", seconds=1, audio=False)
    video = _constant_rate(cfr, tmp_path / "chunk.mp4", probe(cfr).fps)
    before = frame_times(video)
    retime_video(video, frame_times(cfr))
    assert _worst(frame_times(video), before) <= _tick(video)
    assert len(read_frames(video)) == len(before)


def test_a_faststart_file_or_a_different_frame_count_is_refused_untouched(tmp_path: Path, vfr: Path) -> None:
    times = frame_times(vfr)
    faststart = _constant_rate(vfr, tmp_path / "faststart.mp4", probe(vfr).fps, faststart=True)
    plain = _constant_rate(vfr, tmp_path / "plain.mp4", probe(vfr).fps)
    for path, given in ((faststart, times), (plain, times[:-1])):
        data = path.read_bytes()
        with pytest.raises(Mp4TimingError):
            retime_video(path, given)
        assert path.read_bytes() == data


def test_timing_keeps_display_order_and_non_negative_offsets() -> None:
    # Decode order I P B B (composition 0, 3, 1, 2 frames), shown at uneven times.
    timing = plan_timing([0, 300, 100, 200], [0, 10, 30, 60], last_duration=30)
    decode = [sum(timing.durations[:i]) for i in range(4)]
    shown = [d + o - timing.shift for d, o in zip(decode, timing.offsets, strict=True)]
    assert shown == [0, 60, 10, 30]
    assert min(timing.offsets) >= 0 and timing.span == 90
    assert to_ticks([5.0, 5.0, 5.5], 10) == [0, 1, 5]  # equal times still get distinct ticks
    with pytest.raises(Mp4TimingError):
        plan_timing([0, 1], [0], last_duration=1)


def test_not_an_index_is_refused() -> None:
    with pytest.raises(Mp4TimingError):
        mp4_timing.retime_moov(b"\x00\x00\x00\x08free", [0.0])
