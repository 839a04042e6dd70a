"""lip_syncer jobs end to end, through Celery workers and through ``swapfarm run``, on d18 with a spoken-like source
audio (pink-noise bursts): every frame kept in order, only the mouths changed, the source audio in the output —
cut to the video's length, and said so."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, events_of, wait_finished
from tests.support import mask_replicas
from tests.support.audio import make_speech
from tests.support.farm import Farm
from tests.support.lip_sync_replicas import mdx_voice, wav2lip
from tests.support.media import psnr, read_frames
from tests.support.replicas import install_replica
from workers.faces.detection import FaceDetector
from workers.local import run_local
from workers.processors.face_blur import face_region

pytestmark = pytest.mark.integration

FRAMES = 30  # of d18's 216: one second at 30 fps
OPTIONS = {
    "processors": ["lip_syncer"], "trim_end_frame": FRAMES, "chunk_frames": 10,
    "encoder": {"lossless": True, "preset": "ultrafast"},
}  # fmt: skip
RATE = 48_000


@pytest.fixture
def lip_settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", models)
    install_replica(wav2lip(), "wav2lip_gan_96", models)
    install_replica(mdx_voice(frames=32, keep=1200), "kim_vocal_2", models)  # the voice band, up to 7.5 kHz
    return settings.model_copy(
        update={
            "models_dir": models, "model_cache_dir": tmp_path / "model-cache", "allow_model_hash_mismatch": True,
            "model_base_urls": [], "family": "cpu", "lease_seconds": 30,
        }
    )  # fmt: skip


@pytest.fixture
def lip_farm(lip_settings: Settings, tmp_path: Path) -> Iterator[Farm]:
    logs = tmp_path / "lip-logs"
    logs.mkdir()
    farm = Farm(lip_settings, logs)
    yield farm
    farm.stop()


def _samples(path: Path) -> np.ndarray:
    done = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:a:0", "-ac", "1", "-ar", str(RATE), "-f", "f32le", "-"],
        check=True, capture_output=True,
    )  # fmt: skip
    return np.frombuffer(done.stdout, np.float32)


def _lag_ms(output: np.ndarray, source: np.ndarray, reach: int = 40) -> int:
    """The lag (ms) at which the output's audio best matches the source's, searched ±``reach`` ms at 1 ms."""
    step, body = RATE // 1000, slice(reach * RATE // 1000, len(output) - reach * RATE // 1000)
    scores = [float(np.dot(output[body], source[body.start + lag * step : body.stop + lag * step]))
              for lag in range(-reach, reach + 1)]  # fmt: skip
    return int(np.argmax(scores)) - reach


def _check(output: Path, clip: Path, speech: Path, settings: Settings) -> None:
    out, src = read_frames(output), read_frames(clip, FRAMES)
    assert out.shape == src.shape  # every frame, none added
    detector = FaceDetector.load(JobOptions().face, settings)
    moved = 0
    for i in range(FRAMES):
        faces = detector.detect_frame(np.ascontiguousarray(src[i, :, :, ::-1]))
        x1, y1, x2, y2 = face_region(faces[0], src[i].shape)
        pad = (x2 - x1) // 10
        mouth = np.zeros(src[i].shape[:2], bool)
        mouth[y1 + (y2 - y1) // 3 : y2 + pad, x1 - pad : x2 + pad] = True
        assert psnr(out[i][~mouth], src[i][~mouth]) >= 45, f"frame {i}: changed outside the mouth (or out of order)"
        moved += psnr(out[i][mouth], src[i][mouth]) < 40
    assert moved >= FRAMES // 3  # the bursts' frames: their mouths follow the audio
    heard, said = _samples(output), _samples(speech)
    assert abs(len(heard) - FRAMES / 30 * RATE) <= 1024  # the video's length, within one AAC frame
    assert _lag_ms(heard, said) == 0
    assert np.corrcoef(heard[2400:-2400], said[2400 : len(heard) - 2400])[0, 1] > 0.9


def test_a_lip_sync_job_through_the_farm(
    lip_farm: Farm, api: TestClient, lip_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    lip_farm.worker("w1")
    clip = data_dir / "media" / "d18.mp4"
    speech = make_speech(tmp_path / "line.wav", seconds=1.2, burst=0.25, gap=0.15)
    files = [("target", ("d18.mp4", clip.read_bytes(), "video/mp4")),
             ("source_audio", ("line.wav", speech.read_bytes(), "audio/wav"))]  # fmt: skip
    response = api.post("/v1/jobs", files=files, data={"options": json.dumps(OPTIONS)})
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    body = wait_finished(api, job_id, lip_farm)
    assert body["status"] == "succeeded", body
    fitted = events_of(api, job_id, "audio_fitted")
    assert len(fitted) == 1 and "cut by 0.200s" in fitted[0]["message"], fitted
    _check(download(api, job_id, tmp_path / "out.mp4"), clip, speech, lip_settings)


def test_a_lip_sync_job_with_swapfarm_run(lip_settings: Settings, data_dir: Path, tmp_path: Path) -> None:
    clip = data_dir / "media" / "d18.mp4"
    speech = make_speech(tmp_path / "line.m4a", seconds=1.2, burst=0.25, gap=0.15)
    result = run_local(
        target=clip, sources=[], audio=speech, output=tmp_path / "out.mp4",
        options=JobOptions.model_validate(OPTIONS), workers=2, settings=lip_settings,
    )  # fmt: skip
    assert result.status == "succeeded", result
    _check(tmp_path / "out.mp4", clip, speech, lip_settings)


def test_chunks_of_7_15_and_30_frames_give_the_same_pixels(
    lip_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    """Through the whole render path (tracked detection with its look-behind, the planned spectrogram, the pipes,
    each batch's frame numbers): where the chunks are cut changes no pixel.

    The issue names chunks of 7, 15 and 105 frames. A 105-frame chunk cuts only a range longer than 105 frames, and
    three such renders of d18 cost about 3.5 times these (each run of 30 frames takes 10-13 s of CPU here, so about
    100 s more on the 2-core machine): the processor's own test (tests/workers/processors/test_lip_syncer.py)
    renders 105 frames in chunks of 7, 15 and 105, and this one keeps the edges of 7 and 15 (and a whole 30) on the
    full path."""
    clip = data_dir / "media" / "d18.mp4"
    speech = make_speech(tmp_path / "line.wav", seconds=1.0, burst=0.25, gap=0.15)
    settings = lip_settings.model_copy(update={"min_chunk_frames": 1})
    outputs = []
    for size in (7, 15, 30):
        output = tmp_path / f"out-{size}.mp4"
        result = run_local(
            target=clip, sources=[], audio=speech, output=output, workers=2, settings=settings,
            options=JobOptions.model_validate({**OPTIONS, "chunk_frames": size}),
        )  # fmt: skip
        assert result.status == "succeeded", result
        outputs.append(read_frames(output))
    assert not np.array_equal(outputs[0], read_frames(clip, FRAMES))  # the mouths moved
    for other in outputs[1:]:
        np.testing.assert_array_equal(other, outputs[0])
