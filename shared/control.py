"""What a user (or the retention time) does to a job: cancel it, retry it, pause and resume it, approve or
reject its preview, expire its files; and what an admin does to the whole farm: pause and resume it.

Each is one transaction of conditional UPDATEs, with its event, and with the admission it makes possible:
a cancelled job frees a place for the tenant's next waiting job; a retried one waits for a place like a new one.
Callers commit, then send the returned messages and delete files (Postgres first, then Redis and storage).

:func:`cancel`, :func:`retry`, :func:`pause`, :func:`resume`, :func:`approve` and :func:`reject` (the last four
and the farm's pause in ``shared.pausing``, offered here) are what a caller asks for, whichever entry point carried
it (``/v1``, the console, the CLI through ``/v1``): each makes every decision — the caller's right to the job
(another tenant's is not found), its state, the retention time — then commits, sends and deletes.
``tests/api/test_one_submit_path.py`` walks the API's source for a route that changes a job any other way.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import JobExpiredError, NotCancellableError, NotRetryableError
from shared.events import EventKind, record
from shared.farm import Farm
from shared.lifecycle import Note, Outcome, admit, end_job, lock_owner, transition
from shared.models import Chunk, Job, utcnow
from shared.pausing import (
    approve,
    approve_job,
    expire_previews,
    farm_paused,
    pause,
    pause_farm,
    pause_job,
    reject,
    resume,
    resume_farm,
    resume_job,
)
from shared.states import FINISHED_JOB_STATES, ChunkStatus, JobStatus
from shared.tenants import Principal, owned_job

__all__ = [
    "Outcome",
    "approve",
    "approve_job",
    "cancel",
    "cancel_job",
    "expire_due",
    "forget_chunks",
    "leftover_chunks",
    "expire_previews",
    "farm_paused",
    "mark_expired",
    "pause",
    "pause_farm",
    "pause_job",
    "reject",
    "resume",
    "resume_farm",
    "resume_job",
    "retry",
    "retry_job",
]


def cancel(farm: Farm, caller: Principal, job_id: str) -> None:
    """Cancel the caller's job that has not ended, and delete its files; a cancelled job again is no change.

    Raises:
        NotFoundError: no such job, or another tenant's.
        NotCancellableError: ``job_not_cancellable``: the job has ended otherwise.
    """
    settings = farm.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        already = job.status == JobStatus.CANCELLED
        outcome = Outcome(False) if already else cancel_job(session, job.id, settings.max_running_jobs_per_tenant)
    if not already and not outcome.changed:
        raise NotCancellableError(f"job {job_id} has ended; it cannot be cancelled")
    send_all(farm.dispatcher, outcome.messages)
    farm.storage.delete(farm.storage.job_url(job_id), recursive=True)


def retry(farm: Farm, caller: Principal, job_id: str) -> None:
    """Run the caller's failed job again (:func:`retry_job`), unless its files are past the retention time.

    Raises:
        NotFoundError: no such job, or another tenant's.
        JobExpiredError: ``job_expired``: the job finished longer ago than ``output_ttl_seconds`` (its inputs are
            deleted, or about to be).
        NotRetryableError: ``job_not_retryable``: the job has not failed.
    """
    settings = farm.settings
    ttl = settings.output_ttl_seconds
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        past = job.finished_at is not None and utcnow() - job.finished_at > timedelta(seconds=ttl)
        if job.expired_at is not None or past:
            raise JobExpiredError(f"job {job_id}: its files were deleted after the retention time")
        outcome = retry_job(session, job.id, settings.max_running_jobs_per_tenant, ttl_seconds=ttl)
    if not outcome.changed:
        raise NotRetryableError(f"job {job_id} has not failed; only a failed job can be retried")
    send_all(farm.dispatcher, outcome.messages)


def cancel_job(session: Session, job_id: str, default_limit: int) -> Outcome:
    """Cancel a job that has not ended: its queued chunks are dropped and its running ones stop between batches.

    A running chunk's heartbeat finds the chunk no longer ``running`` under its token and stops the render; a
    queued chunk's message finds the job not ``rendering`` and does nothing. The caller deletes the job's files.
    """
    return end_job(session, job_id, JobStatus.CANCELLED, note=Note(EventKind.CANCELLED), default_limit=default_limit)


def retry_job(session: Session, job_id: str, default_limit: int, *, ttl_seconds: float | None = None) -> Outcome:
    """Run a failed job again: only its chunks that are not done are rendered again, each with a fresh attempt
    budget (``attempts`` keeps counting; the limit counts from ``attempts_at_retry``).

    The job waits for admission like a new one, then goes back to the step it failed in (plan, render, stitch).
    A job past the retention time ``ttl_seconds`` is not retried, even while its files are being deleted.
    """
    tenant_id = lock_owner(session, job_id)
    now = utcnow()
    where = [Job.id == job_id, Job.expired_at.is_(None)]
    if ttl_seconds is not None:
        where.append(Job.finished_at >= now - timedelta(seconds=ttl_seconds))
    moved = transition(
        session, Job, JobStatus.WAITING, expected=(JobStatus.FAILED,), where=where,
        values={
            "retries": Job.retries + 1, "attempts": 0, "error_code": None, "error_message": None,
            "finished_at": None, "enqueued_at": now,
        },
        returning=(Job.retries,),
    )  # fmt: skip
    if not moved:
        return Outcome(changed=False)
    transition(
        session, Chunk, ChunkStatus.QUEUED, expected=(ChunkStatus.FAILED, ChunkStatus.CANCELLED),
        where=[Chunk.job_id == job_id],
        values={
            "attempts_at_retry": Chunk.attempts, "frames_done": 0, "error_code": None, "error_message": None,
            "lease_token": None, "lease_expires_at": None, "enqueued_at": now,
        },
    )  # fmt: skip
    record(session, job_id, EventKind.RETRIED, status=JobStatus.WAITING, message=f"retry {moved[0].extra[0]}")
    return Outcome(changed=True, messages=admit(session, tenant_id, default_limit))


def expire_due(session: Session, ttl_seconds: float, limit: int = 100) -> list[str]:
    """Finished jobs past the retention time whose files are not yet deleted, oldest first: the caller deletes
    their files, then marks each one with :func:`mark_expired`. A job whose deletion fails stays due, and the next
    sweep tries again. (Past the retention time a job is not retried: ``retry_job`` with ``ttl_seconds``.)"""
    cutoff = utcnow() - timedelta(seconds=ttl_seconds)
    due = session.scalars(
        select(Job.id)
        .where(Job.status.in_(FINISHED_JOB_STATES), Job.finished_at < cutoff, Job.expired_at.is_(None))
        .order_by(Job.finished_at)
        .limit(limit)
    ).all()
    return list(due)


def mark_expired(session: Session, job_id: str, ttl_seconds: float) -> bool:
    """Record that the job's files are gone (``expired: true``), once; ``True`` when this call did it."""
    done = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.expired_at.is_(None))
        .values(expired_at=utcnow(), output_url=None)
        .returning(Job.id)
    ).first()
    if done is None:
        return False
    record(session, job_id, EventKind.EXPIRED, message=f"files deleted after {ttl_seconds:.0f}s")
    return True


def leftover_chunks(session: Session, *, grace_seconds: float, limit: int = 100) -> list[str]:
    """Succeeded jobs, finished more than ``grace_seconds`` ago and not expired, whose chunk files are still
    recorded: their stitcher stopped between publishing the output and deleting the chunks. The caller deletes the
    job's chunk files, then calls :func:`forget_chunks` (a deletion that fails leaves the job listed)."""
    cutoff = utcnow() - timedelta(seconds=grace_seconds)
    kept = select(Chunk.id).where(Chunk.job_id == Job.id, Chunk.output_url.is_not(None)).exists()
    due = session.scalars(
        select(Job.id)
        .where(Job.status == JobStatus.SUCCEEDED, Job.finished_at < cutoff, Job.expired_at.is_(None), kept)
        .order_by(Job.finished_at)
        .limit(limit)
    ).all()
    return list(due)


def forget_chunks(session: Session, job_id: str) -> None:
    """Record that a succeeded job's chunk files are deleted (the stitch that published its output is done)."""
    session.execute(update(Chunk).where(Chunk.job_id == job_id).values(output_url=None))
