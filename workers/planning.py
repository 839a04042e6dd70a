"""The ``plan`` step: probe the target, cut it into chunks, insert their rows, enqueue one render per chunk.

The plan follows what the file holds, not what its header says: the frames are counted from its packets (with the
demuxer the submission probed, forced), and a file holding more than ``max_frames`` frames or
``max_duration_seconds`` of them fails with ``too_many_frames`` / ``media_too_long`` — the count stops at the limit.
A trimmed job (``shared.output_frames``) is planned over its frame range only: a range outside the frames counted fails
with ``trim_out_of_range``. What the job will write from the frames counted (after ``output_fps``, the trim,
``output_height`` and the frame enhancer) is checked again, as at submission (``shared.limits``): over a limit, the
job fails with ``too_many_frames`` / ``resolution_too_large`` before any chunk is made.

A job is cut into at most ``max_chunks_per_job`` chunks of at least ``min_chunk_frames``
frames: the planner widens the chunks it was asked for rather than insert millions of rows, and says so in the
job's log.
"""

from __future__ import annotations

import logging
from typing import Any

from shared import jobs, lip_sync
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import LeaseLostError, NoFramesError, SwapfarmError, TrimUnsupportedError
from shared.jobs import ChunkPlan
from shared.limits import MediaLimits
from shared.media import MediaInfo, probe
from shared.options import JobOptions
from shared.output_frames import frame_range
from shared.tasks import RENDER_CHUNK, message
from workers import content, degradations, previews
from workers.chunking import bounded_chunk_frames, chunk_seconds_for, default_chunk_frames, plan_chunks
from workers.faces.track_feed import lookbehind_frames
from workers.leases import job_heartbeat
from workers.lip_sync.artefact import Stored
from workers.lip_sync.planning import plan_audio
from workers.runtime import Runtime
from workers.video import frame_index, mp4_timing
from workers.video.frame_scan import FrameScan, scan_frames

logger = logging.getLogger(__name__)


def plan(job_id: str, rt: Runtime) -> None:
    with session_scope(rt.db) as session:
        token = jobs.begin_plan(session, job_id, rt.settings.lease_seconds, worker=rt.hostname)
        job = jobs.get_job(session, job_id) if token else None
        if job is None or token is None:
            logger.info("job %s: not planning (already planned, cancelled or held)", job_id)
            return
        target_url, options, priority = job.target_url, JobOptions.model_validate(job.options), job.priority
        submitted = MediaInfo.from_json(job.media) if job.media else None
        audio = (job.audio_url, job.audio_media) if job.audio_url and job.audio_media else None
    settings = rt.settings
    # Probing a long video (every frame's time) can outlast the lease: the heartbeat keeps the plan ours.
    with degradations.collecting() as found, job_heartbeat(rt, job_id, token):
        try:
            chunks, media, frames, mel = _plan(rt, job_id, target_url, options, submitted, audio)
        except SwapfarmError as exc:
            logger.warning("job %s: planning failed: %s", job_id, exc)
            with session_scope(rt.db) as session:
                failed = jobs.fail_job(session, job_id, exc, default_limit=settings.max_running_jobs_per_tenant)
            send_all(rt.dispatcher, failed.messages)
            degradations.record(rt.db, job_id, found)
            return
    degradations.record(rt.db, job_id, found)
    try:
        with session_scope(rt.db) as session:
            chunk_ids = jobs.record_plan(session, job_id, token, chunks, media.to_json(), options.family)
            if mel is not None:
                lip_sync.record_mel(session, job_id, mel.sha256, mel.size)
    except LeaseLostError:  # another planner owns the job now: retrying this one would only find that out again
        logger.info("job %s: planning lease lost (taken over or cancelled); its plan is dropped", job_id)
        return
    logger.info("job %s: %d frames in %d chunks", job_id, frames, len(chunk_ids))
    send_all(
        rt.dispatcher,
        (message(RENDER_CHUNK, job_id, chunk_id=c, family=options.family, priority=priority) for c in chunk_ids),
    )


def _plan(
    rt: Runtime,
    job_id: str,
    target_url: str,
    options: JobOptions,
    submitted: MediaInfo | None,
    audio: tuple[str, dict[str, Any]] | None = None,
) -> tuple[list[ChunkPlan], MediaInfo, int, Stored | None]:
    """Probe and count the target's frames; its chunks, its media description, its frame count and, for a
    lip_syncer job (``audio``: the source audio's URL and probe), its planned mel spectrogram.

    Raises:
        SwapfarmError: the file is unreadable, not whitelisted, or holds more than a limit.
    """
    settings = rt.settings
    with rt.targets.local(rt.storage, target_url, rt.scratch) as target:
        media = probe(target, submitted.demuxer if submitted is not None else None)
        scan = scan_frames(
            target,
            declared=media.frame_count,
            demuxer=media.demuxer,
            max_frames=settings.max_frames,
            max_seconds=settings.max_duration_seconds,
        )
        content.check(target, media, len(scan.times), settings, rt.scratch / job_id)
    times, keyframes = scan.times, scan.keyframes
    if not times:
        raise NoFramesError("the video has no frames")
    _report_timing(scan)
    trimmed = frame_range(options, len(times))
    frames = range(trimmed.start, trimmed.end)
    shown = mp4_timing.shown_seconds(times[trimmed.start : trimmed.end], media.fps)
    MediaLimits.of(settings).check_output(media.width, media.height, options, frames=len(frames), seconds=shown)
    frame_index.store(rt.storage, job_id, times, rt.scratch)  # the stitch reads the same count
    mel = None
    if audio is not None and "lip_syncer" in options.processors:  # once per job: every chunk reads its windows
        mel = plan_audio(rt, job_id, options, audio_url=audio[0], audio_media=audio[1], times=times, trimmed=trimmed)
    exact = bool(options.chunk_frames)  # asked for: exact sizes; else about chunk_seconds each, cut at keyframes
    # asked for, or a length that suits the job's processors (pixel-free chains get long chunks)
    wanted = options.chunk_frames or default_chunk_frames(
        media.fps_value, chunk_seconds_for(options.processors, settings)
    )
    if scan.untimed:  # decode times are no seek positions once B-frames reorder them: one chunk, read from the start
        if trimmed.start > 0:
            raise TrimUnsupportedError(
                "the video's frames carry no presentation times, so a range cannot start past its first frame "
                "(trim_start_frame); remux it into MP4 or Matroska, or leave trim_start_frame unset"
            )
        return plan_chunks(times, len(frames), media.start_time, frames=frames), media, len(frames), mel
    size = bounded_chunk_frames(len(frames), wanted, settings.min_chunk_frames, settings.max_chunks_per_job)
    # A tracked job's chunk also decodes a look-behind, in the same decoder as its own frames (``lead``). Cut at a
    # keyframe, that decoder would start in the group of pictures before it and decode all of it for a few frames;
    # cut that many frames after the keyframe, it starts at the keyframe.
    lead = lookbehind_frames(options)
    cuts = () if exact else [k + lead for k in keyframes if k > 0]
    chunks = plan_chunks(times, size, media.start_time, cuts, frames, lead)
    while len(chunks) > settings.max_chunks_per_job:  # cuts moved to keyframes can shorten chunks: widen again
        size *= 2
        chunks = plan_chunks(times, size, media.start_time, cuts, frames, lead)
    if options.preview:  # its frames first, each a chunk of its own; the rest held until it is approved
        chunks = previews.split(chunks, previews.preview_frames(frames, options.preview), times, media.start_time)
    if exact and size != wanted:
        degradations.report(
            "chunks_widened",
            f"chunks of {wanted} frames were asked for; they are {size} frames long (at least "
            f"{settings.min_chunk_frames} frames, at most {settings.max_chunks_per_job} chunks a job)",
        )
    return chunks, media, len(frames), mel


def _report_timing(scan: FrameScan) -> None:
    """Frames timed some other way than by their presentation times, made visible (see ``scan_frames``)."""
    if scan.untimed:
        degradations.report(
            "timestamps_missing",
            f"{scan.untimed} video packets carry no presentation time; frames are placed by their decode times"
            + (f", {scan.dropped} packets with no time at all are left out" if scan.dropped else "")
            + ", and the video is rendered as one chunk (its frames cannot be sought exactly)",
        )
