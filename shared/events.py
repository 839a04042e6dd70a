"""A job's event log: what happened to it, in order — state changes, chunk attempts and their workers, errors.

Every function that changes a job or a chunk (``shared.jobs``, ``shared.control``, ``shared.admission``) records
its event with :func:`record` in the same transaction, so the log and the rows never disagree: an event is there
exactly when its change committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.models import JobEvent, utcnow


class EventKind(StrEnum):
    SUBMITTED = "submitted"  # accepted; waiting for its tenant's limit or queued for planning
    ADMITTED = "admitted"  # a waiting job may run now
    PLANNING = "planning"  # a planner claimed it
    PLANNED = "planned"  # cut into chunks; rendering
    CHUNK_STARTED = "chunk_started"  # a worker claimed a chunk (attempt, worker)
    CHUNK_DONE = "chunk_done"
    CHUNK_FAILED = "chunk_failed"  # an attempt failed (error); retried below the attempt limit
    CHUNK_REQUEUED = "chunk_requeued"  # the reaper handed an abandoned chunk back to the queue
    STITCH_READY = "stitch_ready"  # the last chunk is done; stitching
    STITCH_STARTED = "stitch_started"
    REQUEUED = "requeued"  # the reaper sent an abandoned plan or stitch again
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RETRIED = "retried"  # the user asked to run a failed job again
    EXPIRED = "expired"  # the job's files were deleted after the retention time
    # A slower path a chunk took, the job going on (error_code says which: engine_fallback = ONNX Runtime instead
    # of the torch engine for a model, eager_fallback = a model uncompiled); recorded once per job and kind/model.
    DEGRADED = "degraded"


def record(
    session: Session,
    job_id: str,
    kind: EventKind,
    *,
    status: str | None = None,
    chunk_index: int | None = None,
    attempt: int | None = None,
    worker: str | None = None,
    error_code: str | None = None,
    message: str = "",
) -> None:
    """Add an event to the caller's transaction."""
    session.add(
        JobEvent(
            job_id=job_id,
            at=utcnow(),
            kind=kind,
            status=status,
            chunk_index=chunk_index,
            attempt=attempt,
            worker=worker,
            error_code=error_code,
            message=message[:2000],
        )
    )


def after(session: Session, job_id: str, after_id: int = 0, limit: int = 100) -> Sequence[JobEvent]:
    """The job's events with an id above ``after_id``, oldest first."""
    return session.scalars(
        select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after_id).order_by(JobEvent.id).limit(limit)
    ).all()


def record_once(
    session: Session, job_id: str, kind: EventKind, *, error_code: str, message: str, chunk_index: int | None = None
) -> bool:
    """Add an event unless the job already has one of this kind, code and message (a fallback every chunk of a
    job takes is worth one line of its log, not one per chunk). Returns whether it was added."""
    seen = session.scalar(
        select(JobEvent.id)
        .where(JobEvent.job_id == job_id, JobEvent.kind == kind, JobEvent.error_code == error_code)
        .where(JobEvent.message == message[:2000])
        .limit(1)
    )
    if seen is not None:
        return False
    record(session, job_id, kind, chunk_index=chunk_index, error_code=error_code, message=message)
    return True
