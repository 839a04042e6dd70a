"""A job's event log: what happened to it, in order — state changes, chunk attempts and their workers, errors.

Every change of a job or a chunk (``shared.lifecycle.transition``, for ``shared.jobs`` and ``shared.control``) records
its event with :func:`record` in the same transaction, so the log and the rows never disagree: an event is there
exactly when its change committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.errors import public_message
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
    # Controls (``shared.control``)
    PAUSED = "paused"  # no new chunk starts; running ones finish (or, paused ``now``, are stopped and re-queued)
    RESUMED = "resumed"  # back to waiting for admission, then to the step it was paused in
    AWAITING_APPROVAL = "awaiting_approval"  # the preview's frames and stills are ready; approve or reject
    APPROVED = "approved"  # the preview was approved: the rest of the frames render
    # Webhooks (``shared.webhooks``): one event per delivery attempt
    WEBHOOK_DELIVERED = "webhook_delivered"  # the receiver answered 2xx
    WEBHOOK_FAILED = "webhook_failed"  # an attempt failed; tried again later
    WEBHOOK_ABANDONED = "webhook_abandoned"  # an attempt failed and the retry time is over: no more attempts
    FACES = "faces"  # what a face processor did in a chunk: face-frames hidden, how many tracks filled in
    STILLS_FAILED = "stills_failed"  # the before/after stills could not be made (the output is unaffected)
    AUDIO_FITTED = "audio_fitted"  # lip_syncer: the source audio was cut or padded to the video's length
    # -- recovery: what the reaper and the senders saw of the broker ----------------------------------------------
    BROKER_UNREACHABLE = "broker_unreachable"  # the broker did not answer; the job's queued work waits for it
    RESENT = "resent"  # the broker no longer held the job's messages (lost, or never sent): sent again
    # Something made the job worse without failing it (``error_code`` says what): a frame timing that could not be
    # kept, a GPU that fell back to the CPU, a source image with several faces … Recorded once per job and code.
    WARNING = "warning"
    # Workers kept out and jobs routed by tags (``shared.worker_health``): ``worker`` names the worker
    WORKER_BLOCKLISTED = "worker_blocklisted"  # it failed too many chunks of this job: it takes no more of them
    WORKER_QUARANTINED = "worker_quarantined"  # its failure here quarantined it: it takes no work until released
    GROUP_FINISHED = "group_finished"  # a job group's last member ended (logged under the group's id)
    WAITING_FOR_WORKER = "waiting_for_worker"  # no live worker can take the job (``no_worker_with_tags``)


# A job whose latest event of these is a recovery one (and not yet a step that started since) is recovering: its
# progress is stale until a worker takes its work again (``shared.progress``).
RECOVERY_EVENTS = frozenset(
    {EventKind.CHUNK_REQUEUED, EventKind.REQUEUED, EventKind.RESENT, EventKind.BROKER_UNREACHABLE}
)
START_EVENTS = frozenset({EventKind.PLANNING, EventKind.CHUNK_STARTED, EventKind.STITCH_STARTED})


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
            message=public_message(message)[:2000],
        )
    )


def warn(session: Session, job_id: str, code: str, message: str) -> bool:
    """Record a ``warning`` event with ``code`` unless the job already has one; ``True`` when recorded."""
    seen = session.scalar(
        select(JobEvent.id)
        .where(JobEvent.job_id == job_id, JobEvent.kind == EventKind.WARNING, JobEvent.error_code == code)
        .limit(1)
    )
    if seen is not None:
        return False
    record(session, job_id, EventKind.WARNING, error_code=code, message=message)
    return True


def after(session: Session, job_id: str, after_id: int = 0, limit: int = 100) -> Sequence[JobEvent]:
    """The job's events with an id above ``after_id``, oldest first."""
    return session.scalars(
        select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after_id).order_by(JobEvent.id).limit(limit)
    ).all()
