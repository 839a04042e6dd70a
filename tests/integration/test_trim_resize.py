"""Trim, resize and resample, end to end: through the farm (Celery worker processes) and through ``swapfarm run``.

A job trimmed to frames 50–149 of the 216-frame ``d18.mp4`` gives exactly those 100 frames, pixel for pixel
(lossless passthrough), with the audio of those 3.33 seconds, in sync; ``output_height`` scales every frame
keeping the aspect, and ``output_fps`` puts the same duration on another rate's grid.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from fastapi.testclient import TestClient

from shared.media import probe
from shared.settings import Settings
from shared.storage import Storage
from tests.integration.conftest import PLAIN_BLUR, download, submit, wait_finished, with_face_models
from tests.support.farm import Farm, settings_env
from tests.support.media import Frames, assert_frames_match, make_clip, psnr, read_frames
from workers.video import frame_index
from workers.video.frame_scan import frame_times

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

LOSSLESS = {"lossless": True, "preset": "ultrafast"}
TRIM = {"trim_start_frame": 50, "trim_end_frame": 150}  # frames 50–149: the end is excluded
RATE = 16_000  # audio compared at this rate, mono
Samples = npt.NDArray[np.float32]


@pytest.fixture
def settings(settings: Settings, data_dir: Path) -> Settings:
    return with_face_models(settings, data_dir, settings.work_dir.parent)  # the module's folder: one farm for all


@pytest.fixture(scope="module")
def d18(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``d18.mp4``'s video (copied: the same 216 frames) with pink noise for audio: its own track is silence, and
    noise makes any shift of the audio against the video show in a cross-correlation."""
    path = tmp_path_factory.mktemp("d18") / "d18.mp4"
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-i", str(data_dir / "media" / "d18.mp4"), "-f", "lavfi", "-i",
         "anoisesrc=color=pink:seed=7:sample_rate=44100:duration=7.2", "-map", "0:v:0", "-map", "1:a:0",
         "-c:v", "copy", "-c:a", "aac", "-b:a", "192k", str(path)],
        check=True,
    )  # fmt: skip
    return path


@pytest.fixture(scope="module")
def d18_frames(d18: Path) -> Frames:
    frames = read_frames(d18)
    assert len(frames) == 216
    return frames


def _audio(path: Path, start: float = 0.0) -> Samples:
    """The first audio stream from ``start`` seconds on, decoded to mono float samples at :data:`RATE`."""
    raw = subprocess.run(
        ["ffmpeg", "-v", "error", "-ss", f"{start:.6f}", "-i", str(path), "-map", "0:a:0", "-ac", "1",
         "-ar", str(RATE), "-f", "f32le", "pipe:1"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(raw, np.float32)


def _lag_ms(output: Samples, reference: Samples) -> float:
    """Where ``output``'s audio sits against ``reference`` (milliseconds; positive: late), found by
    cross-correlation over ±200 ms."""
    span = min(len(output), len(reference)) - 2 * RATE // 5
    assert span > RATE, "less than a second of audio to compare"
    window = reference[RATE // 5 : RATE // 5 + span]
    best, best_lag = -np.inf, 0
    for lag in range(-RATE // 5, RATE // 5 + 1):
        part = output[RATE // 5 + lag : RATE // 5 + lag + span]
        score = float(np.dot(part, window))
        if score > best:
            best, best_lag = score, lag
    return best_lag * 1000 / RATE


def _assert_trimmed(output: Path, d18: Path, d18_frames: Frames) -> None:
    """Frames 50–149 of ``d18``, each the same picture (lossless), and the audio of those frames, in sync."""
    frames = read_frames(output)
    assert len(frames) == 100, f"{len(frames)} frames, expected 100 (50–149)"
    assert_frames_match(frames, d18_frames[50:150])
    worst = min(psnr(a, b) for a, b in zip(frames, d18_frames[50:150], strict=True))
    assert worst > 45, f"frames differ from input frames 50–149: worst {worst:.1f} dB"

    media = probe(output)
    assert media.has_audio, "the trimmed output lost its audio"
    video_seconds = 100 / 30
    audio = _audio(output)
    assert abs(len(audio) / RATE - video_seconds) < 0.025, (
        f"audio lasts {len(audio) / RATE:.3f}s, the video {video_seconds:.3f}s"
    )
    assert float(np.sqrt(np.mean(audio**2))) > 1e-3, "the audio is silent"
    lag = _lag_ms(audio, _audio(d18, start=50 / 30))
    assert abs(lag) <= 2, f"the audio is {lag:.1f} ms off the input's at frame 50"


def test_a_trimmed_job_renders_frames_50_to_149_with_their_audio_through_the_farm(
    farm: Farm, api: TestClient, settings: Settings, tmp_path: Path, d18: Path, d18_frames: Frames
) -> None:
    farm.worker("w1")
    farm.worker("w2")
    job_id = submit(api, d18, {"processors": ["passthrough"], "encoder": LOSSLESS, "chunk_frames": 30, **TRIM})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    assert body["progress"]["frames_total"] == 100
    assert body["chunks"]["total"] > 1, "several chunks stitched"
    _assert_trimmed(download(api, job_id, tmp_path / "out.mp4"), d18, d18_frames)
    storage = Storage.from_settings(settings)
    with storage.open_read(storage.job_url(job_id, frame_index.NAME)) as stored:
        assert frame_index.decode(stored.read()) == frame_times(d18), "the index the plan stored for the stitch"


def test_a_trimmed_job_through_swapfarm_run_gives_the_same_frames_and_audio(
    settings: Settings, tmp_path: Path, d18: Path, d18_frames: Frames
) -> None:
    output = tmp_path / "trimmed.mp4"
    env = {**os.environ, **settings_env(settings)}
    done = subprocess.run(
        [sys.executable, "-m", "cli", "run", "--target", str(d18), "-o", str(output), "--processor", "passthrough",
         "--chunk-frames", "40", "--trim-start-frame", "50", "--trim-end-frame", "150",
         "--options", '{"encoder": {"lossless": true, "preset": "ultrafast"}}', "--state-dir", str(tmp_path / "state")],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    _assert_trimmed(output, d18, d18_frames)


def _scaled(video: Path, width: int, height: int) -> Frames:
    """Every frame of ``video`` scaled as the farm scales them (FFmpeg's bicubic scaler, on the decoded 4:2:0
    frames, to 4:2:0), as [N,H,W,3] RGB, for comparison."""
    out = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(video), "-map", "0:v:0",
         "-vf", f"scale={width}:{height}:flags=bicubic,format=yuv420p", "-fps_mode", "passthrough",
         "-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    return np.frombuffer(out, np.uint8).reshape(-1, height, width, 3)


@pytest.mark.parametrize("processors", [["passthrough"], ["face_blur"]], ids=["transcode", "pipes"])
def test_output_height_scales_every_frame_keeping_the_aspect(
    farm: Farm, api: TestClient, tmp_path: Path, processors: list[str]
) -> None:
    clip = make_clip(tmp_path / "wide.mp4", seconds=2, size="640x360")  # no faces: face_blur leaves pixels alone
    farm.worker("w1")
    job_id = submit(
        api,
        clip,
        {"processors": processors, "encoder": LOSSLESS, "chunk_frames": 20, "output_height": 180, "face": PLAIN_BLUR},
    )
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    output = download(api, job_id, tmp_path / "out.mp4")
    media = probe(output)
    assert (media.width, media.height) == (320, 180)
    frames = read_frames(output)
    reference = _scaled(clip, 320, 180)
    assert_frames_match(frames, reference)
    worst = min(psnr(a, b) for a, b in zip(frames, reference, strict=True))
    assert worst > 40, f"scaled frames differ from the input scaled: worst {worst:.1f} dB"
    assert abs(media.duration - 2.0) < 0.05


def test_output_fps_resamples_the_frames_onto_the_new_rate_with_the_same_duration(
    farm: Farm, api: TestClient, tmp_path: Path, d18: Path
) -> None:
    farm.worker("w1")
    options = {"processors": ["passthrough"], "encoder": LOSSLESS, "chunk_frames": 30, "output_fps": 15, **TRIM}
    job_id = submit(api, d18, {**options, "output_height": 240})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    output = download(api, job_id, tmp_path / "out.mp4")
    media = probe(output)
    assert media.fps == "15/1" and (media.width, media.height) == (240, 240)
    frames = read_frames(output)
    assert len(frames) == 50, "100 frames at 30 fps are 50 at 15 fps"
    # each output frame k is input frame 50 + 2k (scaled): closer to it than to its neighbours
    reference = _scaled(d18, 240, 240)[50:150]
    for k, frame in enumerate(frames):
        own = psnr(frame, reference[2 * k])
        assert own > 30, f"output frame {k} is not input frame {50 + 2 * k}: {own:.1f} dB"
        for other in (2 * k - 2, 2 * k + 2):
            if 0 <= other < len(reference):
                assert own > psnr(frame, reference[other]), f"output frame {k} matches input {50 + other} better"
    audio = _audio(output)
    assert abs(len(audio) / RATE - 100 / 30) < 0.025
    assert abs(_lag_ms(audio, _audio(d18, start=50 / 30))) <= 2
