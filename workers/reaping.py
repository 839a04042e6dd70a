"""The ``reap`` step (celery beat): hand abandoned work back to the queues, from what Postgres says.

It also admits the tenants' waiting jobs that have a place (a safety net under the admission done by whoever
ends a job) and deletes the files of jobs past the retention time (``output_ttl_seconds``).
"""

from __future__ import annotations

import logging

from shared import admission, control, jobs
from shared.db import session_scope
from shared.dispatch import send_all
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
from workers import notices
from workers.runtime import Runtime

logger = logging.getLogger(__name__)


def reap(rt: Runtime) -> jobs.ReapResult:
    settings = rt.settings
    with session_scope(rt.db) as session:
        result = jobs.reap(session, max_attempts=settings.max_attempts, requeue_after=settings.requeue_after_seconds)
        ids = {*result.plan, *result.stitch, *(job_id for job_id, _ in result.render)}
        rows = {job_id: session.get_one(Job, job_id) for job_id in ids}
        families = {job_id: job.family for job_id, job in rows.items()}
        priorities = {job_id: job.priority for job_id, job in rows.items()}
    for job_id in result.plan:
        logger.warning("job %s: re-sending plan", job_id)
        rt.dispatcher.send(PLAN, JobPayload(job_id=job_id), queue=CONTROL_QUEUE, priority=priorities[job_id])
    for job_id, chunk_id in result.render:
        logger.warning("job %s chunk %s: re-sending render", job_id, chunk_id)
        payload = ChunkPayload(job_id=job_id, chunk_id=chunk_id)
        queue = render_queue(families[job_id])
        rt.dispatcher.send(RENDER_CHUNK, payload, queue=queue, priority=priorities[job_id])
    for job_id in result.stitch:
        logger.warning("job %s: re-sending stitch", job_id)
        rt.dispatcher.send(STITCH, JobPayload(job_id=job_id), queue=STITCH_QUEUE, priority=priorities[job_id])
    for job_id in result.failed:
        logger.error("job %s: failed past the attempt limit", job_id)
    with session_scope(rt.db) as session:
        admitted = admission.admit_all(session, settings.max_running_jobs_per_tenant)
    send_all(rt.dispatcher, admitted)
    _expire(rt)
    return result


def _expire(rt: Runtime) -> None:
    """Delete the files of jobs finished longer ago than the retention time; a job is marked expired only once
    its files are gone. A deletion that fails is a ``expiry_failed`` warning on the job (log, metric, event) and
    is tried again at the next tick."""
    ttl = rt.settings.output_ttl_seconds
    with session_scope(rt.db) as session:
        due = control.expire_due(session, ttl)
    for job_id in due:
        logger.info("job %s: retention time over; deleting its files", job_id)
        try:
            rt.storage.delete(rt.storage.job_url(job_id), recursive=True)
        except Exception as exc:
            notice = notices.report(
                "expiry_failed",
                f"the job's files could not be deleted after the retention time ({type(exc).__name__}); "
                "deleting them is tried again",
            )
            logger.warning("job %s: could not delete its files", job_id, exc_info=True)
            notices.record(rt.db, job_id, [notice])
            continue
        with session_scope(rt.db) as session:
            control.mark_expired(session, job_id, ttl)
