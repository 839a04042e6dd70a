"""A lip_syncer job's audio, planned once: decode the source audio, extract its voice, compute the mel
spectrogram of the rendered range and store it (:mod:`workers.lip_sync.artefact`); its hash goes on the job."""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from shared import jobs
from shared.audio import AudioInfo
from shared.db import session_scope
from shared.errors import ProcessorError
from shared.lip_sync import MEL_COLUMNS_PER_SECOND, SAMPLE_RATE, WINDOW_COLUMNS
from shared.options import JobOptions
from shared.output_frames import FrameRange
from workers.lip_sync import artefact, mel
from workers.lip_sync.artefact import ChunkAudio
from workers.runtime import Runtime

logger = logging.getLogger(__name__)
VOICE_RATE = 48_000


def plan_audio(
    rt: Runtime,
    job_id: str,
    options: JobOptions,
    *,
    audio_url: str,
    audio_media: dict[str, object],
    times: Sequence[float],
    trimmed: FrameRange,
) -> artefact.Stored:
    """The mel spectrogram of the job's rendered frames, stored with the job (its hash and size).

    Raises:
        FfmpegError: the audio cannot be decoded.
        ModelError: the voice extractor cannot be loaded.
    """
    info = AudioInfo.from_json(dict(audio_media))
    starts = mel.frame_columns(times[trimmed.start : trimmed.end])
    columns = int(starts[-1]) + WINDOW_COLUMNS if len(starts) else 0
    seconds = min(columns / MEL_COLUMNS_PER_SECOND + 0.1, rt.settings.max_audio_seconds)
    began = time.monotonic()
    scratch = rt.scratch / job_id
    scratch.mkdir(parents=True, exist_ok=True)
    with rt.storage.local_copy(audio_url, scratch) as local, tempfile.TemporaryDirectory(dir=scratch) as tmp:
        folder = Path(tmp)
        if options.lip_syncer.voice_extractor:
            from workers.lip_sync.voice import VoiceExtractor

            stereo = mel.decode(local, info.demuxer, folder / "48k.raw", seconds=seconds, rate=VOICE_RATE, channels=2)
            voice = VoiceExtractor.load(rt.settings).extract(stereo, folder / "voice.npy")
            mono = mel.resample(voice, VOICE_RATE, folder / "16k.raw")
        else:
            mono = mel.decode(local, info.demuxer, folder / "16k.raw", seconds=seconds, rate=SAMPLE_RATE)
        stored = artefact.store(
            rt.storage, job_id, first_frame=trimmed.start, starts=starts, blocks=mel.spectrogram(mono, columns)
        )
    logger.info(
        "job %s: mel spectrogram of %d frames (%d columns) planned in %.1fs", job_id, len(starts), columns,
        time.monotonic() - began,
    )  # fmt: skip
    return stored


def chunk_audio(rt: Runtime, claim: jobs.ChunkClaim) -> ChunkAudio:
    """The mel windows of the claimed chunk's frames, from the job's planned spectrogram (checked by its hash).

    Raises:
        ProcessorError: the job has no planned spectrogram, or it does not match its hash.
    """
    with session_scope(rt.db) as session:
        job = jobs.get_job(session, claim.job_id)
        sha256 = job.mel_sha256 if job is not None else None
    if sha256 is None:
        raise ProcessorError("the job's audio was not planned (no mel spectrogram); retry the job")
    return artefact.read_chunk(rt.storage, claim.job_id, sha256, claim.frame_start, claim.frame_end)
