"""The ``stitch`` step: concatenate the chunks by stream copy, add the original audio once, publish atomically.

The output is written to a temporary name and moved into place, so no reader ever sees half a file; a stitcher
killed mid-way leaves only the job's lease to expire, and the reaper sends the stitch again.
"""

from __future__ import annotations

import logging
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from shared import jobs, quotas
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import LeaseLostError, StitchMismatchError, SwapfarmError
from shared.events import EventKind, record
from shared.media import MediaInfo, frame_times
from shared.options import JobOptions
from shared.states import JobStatus
from workers import ffmpeg, mp4_timing, notices, stills
from workers.leases import job_heartbeat
from workers.runtime import Runtime

logger = logging.getLogger(__name__)


def stitch(job_id: str, rt: Runtime) -> None:
    lease, limit = rt.settings.lease_seconds, rt.settings.max_running_jobs_per_tenant
    with session_scope(rt.db) as session:
        token = jobs.begin_stitch(session, job_id, lease, worker=rt.hostname)
        job = jobs.get_job(session, job_id) if token else None
        if token is None or job is None:
            logger.info("job %s: not stitching (done, held, or not ready)", job_id)
            return
        chunk_urls = jobs.chunk_outputs(session, job_id)
        options = JobOptions.model_validate(job.options)
        media = MediaInfo.from_json(job.media or {})
        target_url, frames_total = job.target_url, job.frames_total
    output_url = rt.storage.job_url(job_id, "output.mp4")
    started = time.monotonic()
    scratch = rt.scratch / job_id
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        with (
            tempfile.TemporaryDirectory(dir=scratch) as tmp_name,
            ExitStack() as stack,
            job_heartbeat(rt, job_id, token) as beat,
        ):
            tmp = Path(tmp_name)
            parts = [stack.enter_context(rt.storage.local_copy(url, tmp)) for url in chunk_urls]
            list_file = tmp / "chunks.txt"
            list_file.write_text(ffmpeg.concat_list(parts))
            stitched = tmp / "output.mp4"
            with rt.storage.local_copy(target_url, scratch) as target:
                with notices.collecting() as found:
                    times = _stitch(list_file, target, media, stitched, provenance=options.changes_faces, job_id=job_id)
                notices.record(rt.db, job_id, found)
                output_times = frame_times(stitched)
                counted = len(output_times)
                if frames_total is not None and counted != frames_total:
                    raise StitchMismatchError(f"stitched output has {counted} frames, expected {frames_total}")
                _stills(rt, job_id, target, stitched, times, output_times, media, tmp)
            if not beat.alive:
                raise LeaseLostError(f"job {job_id}: stitch lease lost")
            output_bytes = stitched.stat().st_size
            rt.storage.upload(stitched, output_url)
        with session_scope(rt.db) as session:
            finished = jobs.finish_job(session, job_id, token, output_url, default_limit=limit)
            if not finished.changed:
                raise LeaseLostError(f"job {job_id}: stitch lease lost before publishing")
            quotas.add_stored(session, job_id, output_bytes)
    except LeaseLostError:
        with session_scope(rt.db) as session:
            job = jobs.get_job(session, job_id)
            cancelled = job is not None and job.status == JobStatus.CANCELLED
        if cancelled:  # what this stitcher published must not outlive the cancel
            logger.info("job %s: cancelled while stitching; its files are deleted", job_id)
            rt.storage.delete(rt.storage.job_url(job_id), recursive=True)
        else:
            logger.info("job %s: stitch lease lost; another stitcher owns it", job_id)
        return
    except SwapfarmError as exc:
        logger.error("job %s: stitch failed: %s", job_id, exc)
        with session_scope(rt.db) as session:
            failed = jobs.fail_job(session, job_id, exc, default_limit=limit)
        send_all(rt.dispatcher, failed.messages)
        return
    rt.metrics.stitch_seconds.observe(time.monotonic() - started)
    rt.storage.delete(rt.storage.job_url(job_id, "chunks"), recursive=True)
    logger.info("job %s: succeeded, %s", job_id, output_url)
    send_all(rt.dispatcher, finished.messages)


def _stitch(
    list_file: Path, target: Path, media: MediaInfo, output: Path, *, provenance: bool, job_id: str
) -> list[float]:
    """Concatenate the chunks into ``output`` with the audio of ``target``, and its frame times (returned).

    Chunks are encoded at the constant average rate. When the input's frames are not on that grid (a variable
    frame rate), the concatenated video is written first, its frames given the input's times, then remuxed. If
    the times cannot be written, the job still gets every frame, at the constant rate — and a ``vfr_timing_lost``
    warning in its log (``workers.notices``), never silently.
    """
    audio = target if media.has_audio else None
    demuxer = media.demuxer
    times = frame_times(target, demuxer=demuxer)
    if mp4_timing.follows_rate(times, media.fps):
        args = ffmpeg.stitch_args(
            list_file, audio, media.audio_codec, output, provenance=provenance, audio_demuxer=demuxer
        )
        ffmpeg.run(args, what="stitch")
        return times
    video = output.with_name("video.mp4")
    ffmpeg.run(ffmpeg.concat_video_args(list_file, video), what="stitch")
    try:
        mp4_timing.retime_video(video, times)
    except mp4_timing.Mp4TimingError as exc:  # the file is as it was: every frame, at the constant rate
        notices.report(
            "vfr_timing_lost",
            f"the video's frames have variable times that could not be kept ({exc}); every frame is in the "
            f"output, shown at a constant {media.fps} fps",
        )
    args = ffmpeg.remux_args(video, audio, media.audio_codec, output, provenance=provenance, audio_demuxer=demuxer)
    ffmpeg.run(args, what="stitch")
    video.unlink()
    return times


def _stills(
    rt: Runtime,
    job_id: str,
    target: Path,
    output: Path,
    times: list[float],
    output_times: list[float],
    media: MediaInfo,
    tmp: Path,
) -> None:
    """The before/after stills of the jobs console; a failure is the job's event, never the job's failure."""
    folder = tmp / "stills"
    folder.mkdir()
    try:
        made = stills.make(target, output, times, output_times, media, folder)
        stills.publish(rt, job_id, folder, made)
    except (SwapfarmError, OSError) as exc:
        logger.warning("job %s: no before/after stills: %s", job_id, exc)
        with session_scope(rt.db) as session:
            record(session, job_id, EventKind.STILLS_FAILED, message=str(exc)[:500])
