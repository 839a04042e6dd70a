"""A lip_syncer job's planning branches (``workers.lip_sync.planning``, ``shared.lip_sync.record_mel``): without the
voice extractor the decoded audio itself is heard (no voice model is needed); a trimmed job's first rendered frame
hears the audio's start; the spectrogram's hash goes on the job and its bytes count against the quota once, a
re-plan replacing the hash."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shared import jobs
from shared.audio import probe_audio
from shared.db import session_scope
from shared.lip_sync import WINDOW_COLUMNS, record_mel
from shared.models import Job, new_id
from shared.options import JobOptions
from shared.output_frames import FrameRange
from shared.quotas import stored_bytes
from shared.settings import Settings
from shared.storage import Storage
from shared.tenants import ensure_tenant
from tests.shared.test_control import Recorder
from tests.support.audio import make_speech
from workers.lip_sync import artefact, mel
from workers.lip_sync.planning import plan_audio
from workers.runtime import Runtime
from workers.video.codecs import CodecSupport


def test_without_the_voice_extractor_a_trimmed_job_hears_the_audio_from_its_first_rendered_frame(
    tmp_path: Path,
) -> None:
    # no model at all: a voice extractor asked for would fail to load
    settings = Settings(
        environment="test",
        storage_url=f"file://{tmp_path / 'storage'}",
        work_dir=tmp_path / "work",
        models_dir=tmp_path / "no-models",
        model_cache_dir=tmp_path / "no-cache",
        model_base_urls=[],
    )
    storage = Storage(settings.storage_url)
    rt = Runtime(settings, storage, Recorder(), hostname="p", family="cpu", codecs=CodecSupport())
    speech = make_speech(tmp_path / "line.wav", seconds=1.0, burst=0.25, gap=0.15)
    audio_url = storage.job_url("job", "audio.wav")
    storage.upload(speech, audio_url)
    times = [n / 25 for n in range(40)]  # a 25 fps target of 40 frames, rendered from frame 10 to 30
    options = JobOptions.model_validate(
        {"processors": ["lip_syncer"], "lip_syncer": {"voice_extractor": False}, "trim_start_frame": 10,
         "trim_end_frame": 30}
    )  # fmt: skip
    stored = plan_audio(
        rt, "job", options, audio_url=audio_url, audio_media=probe_audio(speech).to_json(), times=times,
        trimmed=FrameRange(10, 30),
    )  # fmt: skip

    heard = artefact.read_chunk(storage, "job", stored.sha256, 10, 30).windows.astype(np.float32)
    decoded = mel.decode(speech, "wav", tmp_path / "16k.raw", seconds=1.0)
    columns = np.concatenate(list(mel.spectrogram(decoded, 20 * 80 // 25 + WINDOW_COLUMNS)), axis=1)
    starts = mel.frame_columns(times[10:30])  # from 0: the first rendered frame hears the audio's start
    expected = np.stack([columns[:, s : s + WINDOW_COLUMNS] for s in starts]).astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(heard, expected, atol=4e-3)
    assert heard[0].max() > mel.SILENT, "the first burst starts at 0 s: the range's first frame hears it"
    before = artefact.read_chunk(storage, "job", stored.sha256, 0, 10).windows
    assert (before == mel.SILENT).all(), "frames trimmed away have no audio"


def test_the_spectrogram_hash_is_kept_on_the_job_its_bytes_counted_once_and_a_replan_replaces_it(
    database_url: str,
) -> None:
    job_id = new_id()
    with session_scope(database_url) as s:
        tenant = ensure_tenant(s, f"t-{new_id()[:12]}").id
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"]), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4", tenant_id=tenant, stored_bytes=1000,
        )  # fmt: skip
    with session_scope(database_url) as s:
        record_mel(s, job_id, "a" * 64, 300)
    with session_scope(database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None and (job.mel_sha256, job.stored_bytes) == ("a" * 64, 1300)
        assert stored_bytes(s, tenant) == 1300, "the tenant's storage quota counts it"
    with session_scope(database_url) as s:  # planned again (a retry): the new plan replaces the old one's files
        record_mel(s, job_id, "b" * 64, 320)
    with session_scope(database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None and (job.mel_sha256, job.stored_bytes) == ("b" * 64, 1300)
