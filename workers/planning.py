"""The ``plan`` step: probe the target, cut it into chunks, insert their rows, enqueue one render per chunk."""

from __future__ import annotations

import logging

from shared import admission, jobs
from shared.db import session_scope
from shared.errors import InputError, SwapfarmError
from shared.media import frame_index, probe
from shared.options import JobOptions
from shared.tasks import RENDER_CHUNK, ChunkPayload, render_queue
from workers.chunking import chunk_seconds_for, default_chunk_frames, plan_chunks
from workers.runtime import Runtime

logger = logging.getLogger(__name__)


def plan(job_id: str, rt: Runtime) -> None:
    with session_scope(rt.db) as session:
        token = jobs.begin_plan(session, job_id, rt.settings.lease_seconds, worker=rt.hostname)
        job = jobs.get_job(session, job_id) if token else None
        if job is None or token is None:
            logger.info("job %s: not planning (already planned, cancelled or held)", job_id)
            return
        target_url, options, priority = job.target_url, JobOptions.model_validate(job.options), job.priority
    try:
        with rt.storage.local_copy(target_url, rt.scratch / job_id) as target:
            media = probe(target)
            times, keyframes = frame_index(target, declared=media.frame_count)
        if not times:
            raise InputError("the video has no frames", code="media_no_frames")
        if options.chunk_frames:  # asked for: exact sizes
            chunks = plan_chunks(times, options.chunk_frames, media.start_time)
        else:  # a length that suits the job's processors, cut at keyframes
            size = default_chunk_frames(media.fps_value, chunk_seconds_for(options.processors, rt.settings))
            chunks = plan_chunks(times, size, media.start_time, keyframes)
    except SwapfarmError as exc:
        logger.warning("job %s: planning failed: %s", job_id, exc)
        with session_scope(rt.db) as session:
            jobs.fail_job(session, job_id, exc.code, exc.message)
        admission.release(rt.db, rt.dispatcher, job_id, rt.settings.max_running_jobs_per_tenant)
        return
    with session_scope(rt.db) as session:
        chunk_ids = jobs.record_plan(session, job_id, token, chunks, media.to_json(), options.family)
    logger.info("job %s: %d frames in %d chunks", job_id, len(times), len(chunk_ids))
    queue = render_queue(options.family)
    for chunk_id in chunk_ids:
        payload = ChunkPayload(job_id=job_id, chunk_id=chunk_id)
        rt.dispatcher.send(RENDER_CHUNK, payload, queue=queue, priority=priority)
