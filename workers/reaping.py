"""The ``reap`` step (celery beat): hand abandoned work back to the queues, from what Postgres says."""

from __future__ import annotations

import logging

from shared import jobs
from shared.db import session_scope
from shared.models import Job
from shared.tasks import (
    CONTROL_QUEUE,
    PLAN,
    RENDER_CHUNK,
    STITCH,
    STITCH_QUEUE,
    ChunkPayload,
    JobPayload,
    render_queue,
)
from workers.runtime import Runtime

logger = logging.getLogger(__name__)


def reap(rt: Runtime) -> jobs.ReapResult:
    settings = rt.settings
    with session_scope(rt.db) as session:
        result = jobs.reap(session, max_attempts=settings.max_attempts, requeue_after=settings.requeue_after_seconds)
        families = {job_id: session.get_one(Job, job_id).family for job_id, _ in result.render}
    for job_id in result.plan:
        logger.warning("job %s: re-sending plan", job_id)
        rt.dispatcher.send(PLAN, JobPayload(job_id=job_id), queue=CONTROL_QUEUE)
    for job_id, chunk_id in result.render:
        logger.warning("job %s chunk %s: re-sending render", job_id, chunk_id)
        payload = ChunkPayload(job_id=job_id, chunk_id=chunk_id)
        rt.dispatcher.send(RENDER_CHUNK, payload, queue=render_queue(families[job_id]))
    for job_id in result.stitch:
        logger.warning("job %s: re-sending stitch", job_id)
        rt.dispatcher.send(STITCH, JobPayload(job_id=job_id), queue=STITCH_QUEUE)
    for job_id in result.failed:
        logger.error("job %s: failed past the attempt limit", job_id)
    return result
