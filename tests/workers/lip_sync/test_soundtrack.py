"""The source audio in a lip_syncer job's output (real ffmpeg): fitted to the video's length, the target's audio
dropped, or ducked under it with keep_target_audio."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from shared.audio import probe_audio
from tests.support.audio import make_speech
from tests.support.media import make_clip
from workers.lip_sync.soundtrack import fit_message, replace_audio, unmixed_message

RATE = 48_000


def _samples(path: Path) -> np.ndarray:
    done = subprocess.run(
        ["ffmpeg", "-v", "error", "-i", str(path), "-map", "0:a:0", "-ac", "1", "-ar", str(RATE), "-f", "f32le", "-"],
        check=True, capture_output=True,
    )  # fmt: skip
    return np.frombuffer(done.stdout, np.float32)


def _tone_level(samples: np.ndarray, hertz: float = 440.0) -> float:
    t = np.arange(len(samples)) / RATE
    return float(np.abs(np.dot(samples, np.exp(-2j * np.pi * hertz * t))) / len(samples))


def test_the_target_audio_is_dropped_or_ducked_under_the_source(tmp_path: Path) -> None:
    video = make_clip(tmp_path / "stitched.mp4", seconds=1.0, size="64x64")  # its audio: a 440 Hz tone
    speech = make_speech(tmp_path / "voice.wav", seconds=0.6)  # shorter: padded with silence
    info = probe_audio(speech)
    dropped, kept = tmp_path / "dropped.mp4", tmp_path / "kept.mp4"
    replace_audio(video, speech, info, 1.0, dropped, keep_target=False, has_target=True)
    replace_audio(video, speech, info, 1.0, kept, keep_target=True, has_target=True)
    alone, mixed, tone = _samples(dropped), _samples(kept), _samples(video)
    assert abs(len(alone) - RATE) <= 1024 and abs(len(mixed) - RATE) <= 1024
    assert np.abs(alone[int(0.65 * RATE) : int(0.95 * RATE)]).max() < 1e-3  # the padding is silence
    assert _tone_level(alone) < 0.1 * _tone_level(tone)  # the target's tone is gone
    under_voice = _tone_level(mixed[int(0.05 * RATE) : int(0.55 * RATE)])
    after_voice = _tone_level(mixed[int(0.8 * RATE) : int(0.98 * RATE)])
    assert 0 < under_voice < 0.7 * after_voice  # ducked while the voice sounds, back up after it


def test_the_fit_says_cut_or_padded_and_by_how_much(tmp_path: Path) -> None:
    info = probe_audio(make_speech(tmp_path / "voice.wav", seconds=1.5))
    assert fit_message(info, 1.0) == "the source audio (1.500s) is cut by 0.500s to the video's 1.000s"
    assert "padded with 0.500s of silence" in (fit_message(info, 2.0) or "")
    assert fit_message(info, 1.5) is None


def test_a_mix_asked_for_on_a_target_without_audio_is_said_not_silently_dropped() -> None:
    assert "the target has no audio" in (unmixed_message(keep_target=True, has_target=False) or "")
    assert unmixed_message(keep_target=True, has_target=True) is None
    assert unmixed_message(keep_target=False, has_target=False) is None
