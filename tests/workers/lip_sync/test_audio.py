"""A lip_syncer job's audio as planned: the mel spectrogram (FaceFusion's recipe), each frame's window, the stored
artefact a chunk reads its own frames' windows from, and the voice extractor on a replica."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from shared.errors import ProcessorError
from shared.lip_sync import MEL_COLUMNS_PER_SECOND, WINDOW_COLUMNS
from shared.storage import Storage
from tests.support.audio import make_speech
from tests.support.lip_sync_replicas import mdx_voice
from tests.support.replicas import install_replica, replica_settings
from workers.lip_sync import artefact, mel
from workers.lip_sync.voice import VoiceExtractor


def _tone(seconds: float, hertz: float, rate: int = 16_000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * hertz * t)).astype(np.float32)[:, None]


def test_a_tone_lights_its_own_mel_band_at_80_columns_a_second() -> None:
    low = np.concatenate(list(mel.spectrogram(_tone(1.0, 300.0), 80)), axis=1)
    high = np.concatenate(list(mel.spectrogram(_tone(1.0, 3000.0), 80)), axis=1)
    assert low.shape == (80, 80)
    band_low, band_high = int(low[:, 40].argmax()), int(high[:, 40].argmax())
    assert band_low < 20 < band_high  # 300 Hz near the bottom of 55–7600 Hz, 3 kHz well above it


def test_columns_past_the_audio_and_digital_silence_are_silent() -> None:
    audio = np.concatenate([_tone(0.5, 440.0), np.zeros((8000, 1), np.float32)])
    columns = np.concatenate(list(mel.spectrogram(audio, 160)), axis=1)
    assert columns[:, 10:30].max() > 0 and (columns[:, 90:] == mel.SILENT).all()


def test_blocks_give_the_columns_of_the_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    audio = np.random.default_rng(1).standard_normal((16_000 * 3, 1)).astype(np.float32)
    whole = np.concatenate(list(mel.spectrogram(audio, 240)), axis=1)
    monkeypatch.setattr(mel, "BLOCK_COLUMNS", 37)
    pieces = np.concatenate(list(mel.spectrogram(audio, 240)), axis=1)
    np.testing.assert_allclose(pieces, whole, atol=1e-4)


def test_a_two_hour_audio_s_last_second_maps_to_the_last_frames() -> None:
    """Computed, not rendered: 2 h at 29.97 fps is 215,784 frames and 576,000 mel columns (FaceFusion's 16-bit index
    wraps at 32,767 columns, about 409 s)."""
    fps = Fraction(30_000, 1001)
    frames = 7200 * fps.numerator // fps.denominator
    times = [float(n / fps) for n in range(frames)]
    starts = mel.frame_columns(times)
    assert starts.dtype == np.int64 and bool(np.all(np.diff(starts) >= 2))
    last_second = 7199 * MEL_COLUMNS_PER_SECOND
    in_last_second = np.flatnonzero(starts >= last_second)
    assert len(in_last_second) in (29, 30) and in_last_second[-1] == frames - 1
    assert starts[-1] + WINDOW_COLUMNS <= 7200 * MEL_COLUMNS_PER_SECOND + WINDOW_COLUMNS
    assert starts[-1] == int(Fraction(frames - 1) * 80 / fps)


def test_a_two_hour_audio_is_planned_stored_and_read_by_its_last_chunk_without_an_index_overflow(
    tmp_path: Path,
) -> None:
    """2 h of digital silence ending in a half-second tone, mapped from a sparse scratch file as the decoder's output
    is: the whole spectrogram (576,012 columns, 71 blocks) is computed and stored, and the last chunk of 105 frames
    reads the windows of its own frames from the last blocks alone. Its frames in the tone's reach hear it; those
    before are silent; its windows are the columns of the last seconds computed on their own."""
    fps, rate = Fraction(30_000, 1001), 16_000
    frames = 7200 * fps.numerator // fps.denominator  # 215,784
    starts = mel.frame_columns(np.arange(frames, dtype=np.float64) / float(fps))
    columns = int(starts[-1]) + WINDOW_COLUMNS
    raw = tmp_path / "16k.raw"
    total = 7200 * rate
    with raw.open("wb") as handle:  # sparse: only the tone's pages are written
        handle.truncate(total * 4)
    samples = np.memmap(raw, dtype=np.float32, mode="r+", shape=(total, 1))
    tone = rate // 2
    samples[-tone:, 0] = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(tone) / rate)
    samples.flush()
    storage = Storage(f"file://{tmp_path / 'storage'}")
    stored = artefact.store(storage, "job", first_frame=0, starts=starts, blocks=mel.spectrogram(samples, columns))
    blocks = -(-columns // mel.BLOCK_COLUMNS)
    assert blocks == 71
    first = frames - 105
    needed = int(starts[first]) // mel.BLOCK_COLUMNS
    for index in range(needed):  # the chunk reads the blocks of its own frames only
        storage.delete(storage.job_url("job", "plan", "mel", f"{index:05d}.bin"))
    windows = artefact.read_chunk(storage, "job", stored.sha256, first, frames).windows.astype(np.float32)

    heard = windows.reshape(105, -1).max(axis=1) > mel.SILENT
    assert heard[-1] and not heard[0] and heard.sum() in range(20, 24)  # the tone's 0.5 s and a window's 0.2 s
    assert bool(np.all(np.diff(heard.astype(int)) >= 0))  # silent, then the tone to the end
    c0 = int(starts[first])  # the last seconds on their own: the same columns (each needs its own samples only)
    alone = np.concatenate(list(mel.spectrogram(np.array(samples[c0 * 200 :]), columns - c0)), axis=1)
    expected = np.stack([alone[:, s - c0 : s - c0 + WINDOW_COLUMNS] for s in starts[first:]])
    np.testing.assert_allclose(windows, expected.astype(np.float16).astype(np.float32), atol=4e-3)


def _stored(tmp_path: Path, frames: int = 120) -> tuple[Storage, str, np.ndarray]:
    storage = Storage(f"file://{tmp_path / 'storage'}")
    audio = np.random.default_rng(2).standard_normal((16_000 * 5, 1)).astype(np.float32)
    starts = mel.frame_columns([n / 25 for n in range(frames)])
    columns = int(starts[-1]) + WINDOW_COLUMNS
    blocks = [b[:, :] for b in mel.spectrogram(audio, columns)]
    whole = np.concatenate(blocks, axis=1)
    small = [whole[:, i : i + 64] for i in range(0, columns, 64)]  # small blocks: several per chunk
    stored = artefact.store(storage, "job", first_frame=10, starts=starts, blocks=small)
    files = storage.listdir(storage.job_url("job", "plan", "mel"))
    assert stored.size == sum(storage.size(f if "://" in f else f"file://{f}") for f in files)
    return storage, stored.sha256, whole.astype(np.float16).astype(np.float32)


def test_a_chunk_reads_its_frames_windows_whatever_the_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artefact, "BLOCK_COLUMNS", 64)
    storage, sha, whole = _stored(tmp_path)
    everything = artefact.read_chunk(storage, "job", sha, 10, 130).windows
    for size in (7, 15, 105):
        parts = [artefact.read_chunk(storage, "job", sha, s, min(s + size, 130)).windows for s in range(10, 130, size)]
        np.testing.assert_array_equal(np.concatenate(parts), everything)
    frame_50 = artefact.read_chunk(storage, "job", sha, 50, 51).windows[0]  # rendered frame 40: from column 128
    np.testing.assert_array_equal(frame_50.astype(np.float32), whole[:, 128:144])


def test_a_chunk_reads_only_the_blocks_of_its_frames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artefact, "BLOCK_COLUMNS", 64)
    storage, sha, _ = _stored(tmp_path)
    before = artefact.read_chunk(storage, "job", sha, 100, 110).windows
    for index in (0, 1, 2, 3):  # frames 100-110 (rendered 90-99) need columns 288-332 only: blocks 4 and 5
        storage.delete(storage.job_url("job", "plan", "mel", f"{index:05d}.bin"))
    np.testing.assert_array_equal(artefact.read_chunk(storage, "job", sha, 100, 110).windows, before)


def test_a_plan_that_changed_is_refused(tmp_path: Path) -> None:
    storage, sha, _ = _stored(tmp_path)
    with pytest.raises(ProcessorError):
        artefact.read_chunk(storage, "job", "0" * 64, 10, 20)
    with storage.open_write(storage.job_url("job", "plan", "mel", "00000.bin")) as out:
        out.write(b"another plan")
    with pytest.raises(ProcessorError):
        artefact.read_chunk(storage, "job", sha, 10, 20)


def test_the_voice_extractor_runs_the_mdx_windows_and_gives_the_voice_band(tmp_path: Path) -> None:
    install_replica(mdx_voice(frames=32, keep=160), "kim_vocal_2", tmp_path / "models")
    extractor = VoiceExtractor.load(replica_settings(tmp_path / "models"))
    assert extractor.frames == 32
    t = np.arange(48_000 * 6) / 48_000  # 6 s: two outer chunks and their overlap
    low, high = np.sin(2 * np.pi * 300 * t), np.sin(2 * np.pi * 4000 * t)
    stereo = np.stack([low + high, low - high], axis=1).astype(np.float32) * 0.4
    voice = extractor.extract(stereo, tmp_path / "voice.npy")
    for channel in (0, 1):  # the 300 Hz kept, the 4 kHz gone: all but a few samples where a chunk's edge cut it
        error = np.abs(voice[:, channel] - 0.4 * low)
        assert np.median(error) < 1e-3 and (error > 0.01).sum() < 100, ((error > 0.01).sum(), np.median(error))


def test_the_planner_decodes_a_real_file(tmp_path: Path) -> None:
    speech = make_speech(tmp_path / "speech.m4a", seconds=1.2)
    samples = mel.decode(speech, "mov", tmp_path / "16k.raw", seconds=1.0)
    assert samples.shape[1] == 1 and abs(len(samples) - 16_000) <= 1
