"""The step function of each task of the farm's table (``shared.tasks.TASKS``): what a worker runs for a message.

Both the Celery worker (``workers.celery_app``) and ``swapfarm run`` (``workers.local``) run a task as
``STEPS[name](rt, payload)``, inside the job's log context; the table says the payload type and the retry policy.
``tests/workers/test_steps.py`` checks that every task of the table has a step here, and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from sqlalchemy.exc import OperationalError

from shared import worker_health
from shared.db import session_scope
from shared.log_context import job_context
from shared.models import Job
from shared.tasks import (
    DELIVER_WEBHOOKS,
    PLAN,
    REAP,
    RENDER_CHUNK,
    STITCH,
    TASKS,
    ChunkPayload,
    JobPayload,
    NoPayload,
    Payload,
    message,
)
from workers import planning, reaping, rendering, stitching, webhook_delivery
from workers.runtime import Runtime

__all__ = ["STEPS", "Step", "run_step"]

logger = logging.getLogger(__name__)

Step = Callable[[Runtime, Payload], None]


def _held(rt: Runtime, task: str, payload: JobPayload) -> bool:
    """A quarantined worker takes no work (``shared.worker_health``): a plan or stitch it receives goes back to the
    queue, after a heartbeat, for another worker. (Its render tokens are passed on by ``workers.rendering``.)"""
    with session_scope(rt.db) as session:
        if not worker_health.quarantined(session, rt.hostname):
            return False
        job = session.get(Job, payload.job_id)
        again = message(task, payload.job_id, family=job.family, priority=job.priority) if job is not None else None
    if again is not None:
        logger.info("worker %s is quarantined: %s of job %s passed on", rt.hostname, task, payload.job_id)
        send = rt.dispatcher.send
        send(
            again.task,
            again.payload,
            queue=again.queue,
            countdown=rt.settings.heartbeat_seconds,
            priority=again.priority,
        )
    return True


def _plan(rt: Runtime, payload: Payload) -> None:
    assert isinstance(payload, JobPayload)
    if not _held(rt, PLAN, payload):
        planning.plan(payload.job_id, rt)


def _render(rt: Runtime, payload: Payload) -> None:
    assert isinstance(payload, ChunkPayload)
    rendering.render_chunk(payload.job_id, payload.chunk_id, rt)


def _stitch(rt: Runtime, payload: Payload) -> None:
    assert isinstance(payload, JobPayload)
    if not _held(rt, STITCH, payload):
        stitching.stitch(payload.job_id, rt)


def _reap(rt: Runtime, payload: Payload) -> None:
    # Periodic, so the next tick is its retry: retrying each failed tick too would pile reaps up in an outage.
    try:
        reaping.reap(rt, rt.celery)
    except OperationalError:
        logger.warning("reap skipped: the database is unavailable; the next tick tries again")


def _deliver_webhooks(rt: Runtime, payload: Payload) -> None:
    # Periodic like the reaper: a failed tick is retried by the next one, the outbox keeps what is due.
    try:
        webhook_delivery.deliver_due(rt)
    except OperationalError:
        logger.warning("webhooks not delivered: the database is unavailable; the next tick tries again")


STEPS: Final[dict[str, Step]] = {
    PLAN: _plan,
    RENDER_CHUNK: _render,
    STITCH: _stitch,
    REAP: _reap,
    DELIVER_WEBHOOKS: _deliver_webhooks,
}


def run_step(rt: Runtime, task: str, fields: dict[str, object]) -> None:
    """Run ``task``'s step on the payload made of ``fields`` (a message's keyword arguments), in its job's context.

    Raises:
        KeyError: ``task`` is not in the table.
        pydantic.ValidationError: ``fields`` are not the task's payload.
    """
    payload = TASKS[task].payload.model_validate(fields)
    if isinstance(payload, NoPayload):
        STEPS[task](rt, payload)
        return
    with job_context(job_id=payload.job_id, chunk_id=getattr(payload, "chunk_id", None)):
        STEPS[task](rt, payload)
