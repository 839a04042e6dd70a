"""The lip_syncer processor on d18 (real YuNet; lip-sync and landmark replicas): mouths follow each frame's window
wherever the chunks are cut, only the mouth region changes, a silent frame keeps its mouth."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from shared.errors import InvalidOptionsError
from shared.lip_sync import MEL_BANDS, WINDOW_COLUMNS
from shared.options import JobOptions
from tests.support import mask_replicas
from tests.support.faces import MODELS, clip_frames, detector, psnr
from tests.support.lip_sync_replicas import edtalk, wav2lip
from tests.support.replicas import install_replica, replica_settings
from workers.lip_sync.artefact import ChunkAudio
from workers.processors import ProcessorContext, Work, build
from workers.processors.face_blur import face_region
from workers.processors.lip_syncer import LipSyncerProcessor

pytestmark = pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")

FRAMES = 105
LOUD, QUIET = 2.0, -4.0


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("lip-models")
    shutil.copy(MODELS / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", folder)
    install_replica(wav2lip(), "wav2lip_gan_96", folder)
    install_replica(wav2lip(name="wav2lip_96", batch=1), "wav2lip_96", folder)  # a file fixed to one face a call
    install_replica(edtalk(), "edtalk_256", folder)
    return folder


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return clip_frames("d18.mp4", list(range(FRAMES)))


def _windows(count: int) -> np.ndarray:
    """Syllables: 4 loud frames, 3 silent ones, the loudness varying."""
    values = np.where(np.arange(count) % 7 < 4, LOUD + np.sin(np.arange(count)), QUIET)
    return np.broadcast_to(values[:, None, None], (count, MEL_BANDS, WINDOW_COLUMNS)).astype(np.float16)


def _render(models: Path, frames: np.ndarray, chunk: int, model: str = "wav2lip_gan_96", batch: int = 8) -> np.ndarray:
    """The frames rendered chunk by chunk, a processor built per chunk with its own frames' windows, as a worker
    renders them."""
    options = JobOptions.model_validate({"processors": ["lip_syncer"], "lip_syncer": {"model": model}})
    settings = replica_settings(models, batch_size=batch)
    windows, out = _windows(len(frames)), []
    for start in range(0, len(frames), chunk):
        end = min(start + chunk, len(frames))
        audio = ChunkAudio(start, windows[start:end])
        processor = build("lip_syncer", ProcessorContext(options=options, sources=[], settings=settings, audio=audio))
        out += [processor.process(frames[s : min(s + batch, end)]) for s in range(start, end, batch)]
    return np.concatenate(out)


@pytest.mark.slow
def test_chunk_sizes_7_15_and_105_give_identical_mouths(models: Path, frames: np.ndarray) -> None:
    whole = _render(models, frames, 105)
    for chunk in (7, 15):
        np.testing.assert_array_equal(_render(models, frames, chunk), whole)


def test_only_the_mouth_changes_and_silent_frames_keep_theirs(models: Path, frames: np.ndarray) -> None:
    out = _render(models, frames[:21], 21)
    loud = np.arange(21) % 7 < 4
    for i in np.flatnonzero(~loud):
        np.testing.assert_array_equal(out[i], frames[i])
    faces = detector().detect(frames[:21])
    for i in np.flatnonzero(loud):
        x1, y1, x2, y2 = face_region(faces[i][0], frames[i].shape)
        mouth = np.zeros(frames[i].shape[:2], bool)
        mouth[y1 + (y2 - y1) // 3 : y2, x1:x2] = True  # the lower two thirds of the face box
        changed = np.abs(out[i].astype(int) - frames[i].astype(int)).max(axis=2) > 8
        assert changed[mouth].mean() > 0.05, f"frame {i}: the mouth did not move"
        assert not changed[~mouth].any(), f"frame {i}: pixels changed outside the mouth region"
        assert psnr(out[i][~mouth], frames[i][~mouth]) >= 45


def test_faces_are_batched_across_frames_and_a_fixed_batch_file_gives_the_same(
    models: Path, frames: np.ndarray
) -> None:
    dynamic = _render(models, frames[:16], 16, batch=16)
    fixed = _render(models, frames[:16], 16, model="wav2lip_96", batch=16)  # one face a call, split by the engine
    np.testing.assert_array_equal(dynamic, fixed)


def test_edtalk_syncs_inside_its_box(models: Path, frames: np.ndarray) -> None:
    out = _render(models, frames[:4], 4, model="edtalk_256")
    for i in range(4):  # loud frames: each face changed
        assert not np.array_equal(out[i], frames[i])


def test_a_batch_hears_the_windows_of_its_own_frames_whatever_order_its_batches_come_in(
    models: Path, frames: np.ndarray
) -> None:
    """Each batch's windows come from its frames' numbers (``Work.first``), not from how many batches came before."""
    in_order = _render(models, frames[:16], 16)
    options = JobOptions.model_validate({"processors": ["lip_syncer"]})
    audio = ChunkAudio(0, _windows(16))
    processor = build(
        "lip_syncer",
        ProcessorContext(options=options, sources=[], settings=replica_settings(models, batch_size=8), audio=audio),
    )
    assert isinstance(processor, LipSyncerProcessor)
    out = {}
    for first in (8, 0):  # the second batch first
        batch = frames[first : first + 8]
        faces = processor.detector.detect(batch)
        assert processor.targeter is not None
        work = Work(batch, faces, processor.targeter.select(batch, faces), first=first)
        for stage in processor.stages():
            work = stage(work)
        out[first] = work.frames
    np.testing.assert_array_equal(np.concatenate([out[0], out[8]]), in_order)


def test_a_chunk_without_planned_audio_is_an_options_error(models: Path) -> None:
    options = JobOptions(processors=["lip_syncer"])
    with pytest.raises(InvalidOptionsError):
        build("lip_syncer", ProcessorContext(options=options, sources=[], settings=replica_settings(models)))
