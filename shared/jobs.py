"""Every state change of jobs and chunks, each one conditional UPDATE in the caller's transaction.

Workers and the API change rows only through these functions, so the rules live in one place:

* a step *claims* its row with a lease (a random token and an expiry); a second delivery of the same task finds
  the lease held and does nothing;
* only the lease holder may finish its step (``WHERE lease_token = :token``);
* the call that finishes the last chunk moves the job to ``stitching`` — decided under the job row's lock, so
  exactly one caller sees it and enqueues the stitch;
* the reaper (``shared.reaper``) hands expired leases and lost messages back to the queues, and fails a job past
  the attempt limit with the last error;
* each change records its event in the job's log (``shared.events``) in the same transaction.

Callers commit, then enqueue what the function returned (Postgres first, Redis second).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from shared import webhooks
from shared.errors import InputError, LeaseLostError, SwapfarmError, public_message
from shared.events import RECOVERY_EVENTS, START_EVENTS, EventKind, record
from shared.models import Chunk, Job, JobEvent, utcnow
from shared.options import JobOptions
from shared.states import ACTIVE_JOB_STATES, ChunkStatus, JobStatus, chunk_sources_of, sources_of
from shared.tasks import DEFAULT_PRIORITY

if TYPE_CHECKING:
    from shared import reaper

WORKER_LOST = "worker_lost"


def _token() -> str:
    return uuid.uuid4().hex


def _until(seconds: float) -> datetime:
    return utcnow() + timedelta(seconds=seconds)


def create_job(
    session: Session,
    *,
    job_id: str,
    options: JobOptions,
    target_url: str,
    source_urls: Sequence[str],
    target_name: str,
    media: dict[str, Any] | None = None,
    tenant_id: str | None = None,
    priority: int = DEFAULT_PRIORITY,
    idempotency_key: str | None = None,
    request_hash: str | None = None,
    callback_url: str | None = None,
    stored_bytes: int = 0,
) -> Job:
    """Insert a job: ``queued`` when it has no tenant, else ``waiting`` for admission (``shared.admission``).

    Raises:
        sqlalchemy.exc.IntegrityError: the tenant already has a job with this idempotency key (at flush).
    """
    status = JobStatus.QUEUED if tenant_id is None else JobStatus.WAITING
    job = Job(
        id=job_id,
        status=status,
        tenant_id=tenant_id,
        priority=priority,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        options=options.model_dump(mode="json"),
        target_url=target_url,
        source_urls=list(source_urls),
        target_name=target_name,
        family=options.family,
        media=media,
        enqueued_at=utcnow(),
        callback_url=callback_url,
        stored_bytes=stored_bytes,
    )
    session.add(job)
    session.flush()
    record(session, job_id, EventKind.SUBMITTED, status=status, message=f"priority {priority}")
    return job


def get_job(session: Session, job_id: str) -> Job | None:
    return session.get(Job, job_id)


def lock_job(session: Session, job_id: str) -> Job | None:
    """Read the job row under a row lock, serialising the callers that decide on the job's next step."""
    return session.scalars(select(Job).where(Job.id == job_id).with_for_update()).one_or_none()


# -- plan -------------------------------------------------------------------------------------------------


def begin_plan(session: Session, job_id: str, lease_seconds: float, *, worker: str | None = None) -> str | None:
    """Claim the job for planning; ``None`` when another planner holds it or it is past planning."""
    now, token = utcnow(), _token()
    claimed = session.execute(
        update(Job)
        .where(Job.id == job_id)
        .where((Job.status == JobStatus.QUEUED) | ((Job.status == JobStatus.PLANNING) & (Job.lease_expires_at < now)))
        .values(
            status=JobStatus.PLANNING,
            lease_token=token,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            attempts=Job.attempts + 1,
            started_at=func.coalesce(Job.started_at, now),
        )
        .returning(Job.attempts)
    ).first()
    if claimed is None:
        return None
    record(session, job_id, EventKind.PLANNING, status=JobStatus.PLANNING, attempt=claimed[0], worker=worker)
    return token


@dataclass(frozen=True)
class ChunkPlan:
    index: int
    frame_start: int
    frame_end: int  # exclusive
    seek_seconds: float


def record_plan(
    session: Session,
    job_id: str,
    token: str,
    chunks: Sequence[ChunkPlan],
    media: dict[str, Any],
    family: str,
) -> list[str]:
    """Insert the chunk rows and move the job to ``rendering``; returns the chunk ids to enqueue.

    Raises:
        LeaseLostError: the planner's lease was taken over (it ran past its lease).
    """
    job = lock_job(session, job_id)
    if job is None or job.lease_token != token or job.status != JobStatus.PLANNING:
        raise LeaseLostError(f"job {job_id}: planning lease lost")
    now = utcnow()
    rows = [
        Chunk(
            job_id=job_id,
            index=c.index,
            frame_start=c.frame_start,
            frame_end=c.frame_end,
            seek_seconds=c.seek_seconds,
            status=ChunkStatus.QUEUED,
            enqueued_at=now,
        )
        for c in chunks
    ]
    session.add_all(rows)
    job.status = JobStatus.RENDERING
    job.lease_token = None
    job.lease_expires_at = None
    job.attempts = 0
    job.media = media
    job.family = family
    job.frames_total = sum(c.frame_end - c.frame_start for c in chunks)
    job.chunks_total = len(rows)
    session.flush()
    message = f"{job.frames_total} frames in {len(rows)} chunks"
    record(session, job_id, EventKind.PLANNED, status=JobStatus.RENDERING, message=message)
    return [r.id for r in rows]


# -- render -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkClaim:
    chunk_id: str
    job_id: str
    token: str
    index: int
    frame_start: int
    frame_end: int
    seek_seconds: float
    attempt: int
    worker: str = ""


def claim_chunk(
    session: Session, chunk_id: str, *, worker: str, family: str, lease_seconds: float
) -> ChunkClaim | None:
    """Take the chunk's lease; ``None`` if it is done, held by a live lease, or its job is not rendering."""
    now, token = utcnow(), _token()
    rendering = select(Job.id).where(Job.id == Chunk.job_id, Job.status == JobStatus.RENDERING).exists()
    row = session.execute(
        update(Chunk)
        .where(Chunk.id == chunk_id)
        .where(
            (Chunk.status == ChunkStatus.QUEUED)
            | ((Chunk.status == ChunkStatus.RUNNING) & (Chunk.lease_expires_at < now))
        )
        .where(rendering)
        .values(
            status=ChunkStatus.RUNNING,
            lease_token=token,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            attempts=Chunk.attempts + 1,
            worker=worker,
            family=family,
            started_at=now,
            frames_done=0,
        )
        .returning(Chunk.job_id, Chunk.index, Chunk.frame_start, Chunk.frame_end, Chunk.seek_seconds, Chunk.attempts)
    ).first()
    if row is None:
        return None
    record(session, row[0], EventKind.CHUNK_STARTED, chunk_index=row[1], attempt=row[5], worker=worker)
    return ChunkClaim(chunk_id, row[0], token, row[1], row[2], row[3], row[4], row[5], worker)


def heartbeat(session: Session, claim: ChunkClaim, frames_done: int, lease_seconds: float) -> bool:
    """Extend the lease and record progress; ``False`` means stop: the lease is lost or the job cancelled."""
    done = session.execute(
        update(Chunk)
        .where(Chunk.id == claim.chunk_id, Chunk.lease_token == claim.token)
        .where(Chunk.status == ChunkStatus.RUNNING)
        .values(lease_expires_at=_until(lease_seconds), frames_done=frames_done)
        .returning(Chunk.id)
    ).first()
    return done is not None


def finish_chunk(session: Session, claim: ChunkClaim, output_url: str, seconds: float) -> bool:
    """Mark the chunk done; returns ``True`` for exactly one caller: the one that finished the last chunk.

    Raises:
        LeaseLostError: the chunk was taken over or cancelled while this worker rendered it.
    """
    job = lock_job(session, claim.job_id)
    frames = claim.frame_end - claim.frame_start
    done = session.execute(
        update(Chunk)
        .where(Chunk.id == claim.chunk_id, Chunk.lease_token == claim.token)
        .where(Chunk.status == ChunkStatus.RUNNING)
        .values(
            status=ChunkStatus.DONE,
            output_url=output_url,
            finished_at=utcnow(),
            render_seconds=seconds,
            frames_done=frames,
            lease_token=None,
            lease_expires_at=None,
            # An earlier attempt's error is history once the chunk is done: the job's events keep it.
            error_code=None,
            error_message=None,
        )
        .returning(Chunk.id)
    ).first()
    if done is None or job is None:
        raise LeaseLostError(f"chunk {claim.chunk_id}: lease lost before it was marked done")
    record(
        session, claim.job_id, EventKind.CHUNK_DONE, chunk_index=claim.index, attempt=claim.attempt,
        worker=claim.worker or None, message=f"{frames} frames in {seconds:.1f}s",
    )  # fmt: skip
    # Counted in SQL, not read-modify-write: on SQLite the row lock above is a no-op, the write lock is not.
    counted = session.execute(
        update(Job)
        .where(Job.id == claim.job_id)
        .values(chunks_done=Job.chunks_done + 1, frames_done=Job.frames_done + frames)
        .returning(Job.chunks_done, Job.chunks_total)
    ).one()
    if counted[0] < (counted[1] or 0):
        return False
    moved = session.execute(
        update(Job)
        .where(Job.id == claim.job_id, Job.status == JobStatus.RENDERING)
        .values(status=JobStatus.STITCHING, attempts=0, enqueued_at=utcnow())
        .returning(Job.id)
    ).first()
    if moved is not None:
        record(session, claim.job_id, EventKind.STITCH_READY, status=JobStatus.STITCHING)
    return moved is not None


@dataclass(frozen=True)
class FailOutcome:
    retry: bool
    job_failed: bool


def fail_chunk(session: Session, claim: ChunkClaim, error: SwapfarmError, max_attempts: int) -> FailOutcome:
    """Record a failed attempt: back to ``queued`` below the limit, else the chunk and its job fail."""
    chunk = session.get(Chunk, claim.chunk_id, with_for_update=True)
    if chunk is None or chunk.lease_token != claim.token or chunk.status != ChunkStatus.RUNNING:
        return FailOutcome(retry=False, job_failed=False)
    chunk.error_code, chunk.error_message = error.code, public_message(error.message)
    chunk.lease_token, chunk.lease_expires_at = None, None
    final = isinstance(error, InputError) or chunk.attempts - chunk.attempts_at_retry >= max_attempts
    record(
        session, chunk.job_id, EventKind.CHUNK_FAILED, chunk_index=chunk.index, attempt=chunk.attempts,
        worker=chunk.worker, error_code=error.code,
        message=f"{error.message} ({'no more attempts' if final else 'will retry'})",
    )  # fmt: skip
    if final:
        chunk.status = ChunkStatus.FAILED
        failed = fail_job(session, chunk.job_id, error.code, error.message)
        return FailOutcome(retry=False, job_failed=failed)
    chunk.status = ChunkStatus.QUEUED
    chunk.enqueued_at = utcnow()
    return FailOutcome(retry=True, job_failed=False)


# -- stitch -----------------------------------------------------------------------------------------------


def begin_stitch(session: Session, job_id: str, lease_seconds: float, *, worker: str | None = None) -> str | None:
    now, token = utcnow(), _token()
    claimed = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.STITCHING)
        .where(Job.lease_expires_at.is_(None) | (Job.lease_expires_at < now))
        .values(
            lease_token=token,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            attempts=Job.attempts + 1,
        )
        .returning(Job.attempts)
    ).first()
    if claimed is None:
        return None
    record(session, job_id, EventKind.STITCH_STARTED, status=JobStatus.STITCHING, attempt=claimed[0], worker=worker)
    return token


def extend_job_lease(session: Session, job_id: str, token: str, lease_seconds: float) -> bool:
    done = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_token == token)
        .values(lease_expires_at=_until(lease_seconds))
        .returning(Job.id)
    ).first()
    return done is not None


def chunk_outputs(session: Session, job_id: str) -> list[str]:
    urls = session.scalars(select(Chunk.output_url).where(Chunk.job_id == job_id).order_by(Chunk.index)).all()
    if any(u is None for u in urls):
        raise LeaseLostError(f"job {job_id}: a chunk has no output")
    return [u for u in urls if u is not None]


def finish_job(session: Session, job_id: str, token: str, output_url: str) -> bool:
    done = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_token == token, Job.status == JobStatus.STITCHING)
        .values(
            status=JobStatus.SUCCEEDED,
            output_url=output_url,
            finished_at=utcnow(),
            lease_token=None,
            lease_expires_at=None,
            error_code=None,
            error_message=None,
        )
        .returning(Job.id)
    ).first()
    if done is not None:
        record(session, job_id, EventKind.SUCCEEDED, status=JobStatus.SUCCEEDED)
        webhooks.enqueue(session, job_id, JobStatus.SUCCEEDED)
    return done is not None


def fail_job(session: Session, job_id: str, code: str, message: str) -> bool:
    """Fail the job unless it already ended; its unfinished chunks are cancelled in the same transaction."""
    done = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(sources_of(JobStatus.FAILED)))
        .values(
            status=JobStatus.FAILED,
            error_code=code,
            error_message=public_message(message),
            finished_at=utcnow(),
            lease_token=None,
            lease_expires_at=None,
        )
        .returning(Job.id)
    ).first()
    if done is None:
        return False
    session.execute(
        update(Chunk)
        .where(Chunk.job_id == job_id, Chunk.status.in_(chunk_sources_of(ChunkStatus.CANCELLED)))
        .values(status=ChunkStatus.CANCELLED, lease_token=None, lease_expires_at=None)
    )
    record(session, job_id, EventKind.FAILED, status=JobStatus.FAILED, error_code=code, message=message)
    webhooks.enqueue(session, job_id, JobStatus.FAILED)
    return True


# -- reap -------------------------------------------------------------------------------------------------


def reap(session: Session, *, max_attempts: int, requeue_after: float) -> reaper.ReapResult:
    """The reaper's sweep without the broker's contents; see :mod:`shared.reaper`."""
    from shared import reaper  # the reaper builds on this module's state changes

    return reaper.reap(session, max_attempts=max_attempts, requeue_after=requeue_after)


# -- progress ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    frames_done: int
    frames_total: int | None
    chunks: dict[str, int]
    frames_per_second: float | None = None  # the farm's measured rate on this job, while it renders
    eta_seconds: float | None = None  # None while recovering: the rate measured before a loss says nothing now
    recovering: bool = False


def progress(session: Session, job: Job) -> Progress:
    """Frames rendered so far (finished chunks plus the running ones' heartbeats), chunks by state, and whether
    the job is recovering from a loss (:func:`recovering`), in which case it has no ETA."""
    rows = session.execute(
        select(Chunk.status, func.count(), func.coalesce(func.sum(Chunk.frames_done), 0))
        .where(Chunk.job_id == job.id)
        .group_by(Chunk.status)
    ).all()
    counts = {str(status): 0 for status in ChunkStatus}
    frames = 0
    for status, count, done in rows:
        counts[str(status)] = int(count)
        frames += int(done)
    fps = _throughput(session, job.id) if job.status == JobStatus.RENDERING else None
    waiting_on_recovery = recovering(session, job)
    eta = None
    if fps and job.frames_total is not None and not waiting_on_recovery:
        eta = round(max(job.frames_total - frames, 0) / fps, 1)
    return Progress(
        frames_done=frames,
        frames_total=job.frames_total,
        chunks=counts,
        frames_per_second=fps,
        eta_seconds=eta,
        recovering=waiting_on_recovery,
    )


def recovering(session: Session, job: Job) -> bool:
    """Whether the job waits on a recovery, so that its progress says nothing about when it ends: a running
    chunk's lease is overdue (its worker stopped heartbeating), or since the latest step a worker started the
    job's work was re-queued or re-sent, or the broker was found unreachable (``shared.events.RECOVERY_EVENTS``)."""
    if job.status not in ACTIVE_JOB_STATES:
        return False
    overdue = session.scalar(
        select(Chunk.id)
        .where(Chunk.job_id == job.id, Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < utcnow())
        .limit(1)
    )
    if overdue is not None:
        return True
    last_recovery, last_start = session.execute(
        select(
            func.max(case((JobEvent.kind.in_(RECOVERY_EVENTS), JobEvent.id))),
            func.max(case((JobEvent.kind.in_(START_EVENTS), JobEvent.id))),
        ).where(JobEvent.job_id == job.id)
    ).one()
    return last_recovery is not None and (last_start is None or last_recovery > last_start)


def _throughput(session: Session, job_id: str) -> float | None:
    """Frames per second of the farm on this job: the rate one chunk renders at (measured on the finished
    chunks and the running ones so far) times the chunks rendering now."""
    done_frames, done_seconds = session.execute(
        select(
            func.coalesce(func.sum(Chunk.frame_end - Chunk.frame_start), 0),
            func.coalesce(func.sum(Chunk.render_seconds), 0.0),
        ).where(Chunk.job_id == job_id, Chunk.status == ChunkStatus.DONE, Chunk.render_seconds.is_not(None))
    ).one()
    running = session.execute(
        select(Chunk.frames_done, Chunk.started_at).where(Chunk.job_id == job_id, Chunk.status == ChunkStatus.RUNNING)
    ).all()
    now = utcnow()
    frames = int(done_frames) + sum(int(f) for f, _ in running)
    seconds = float(done_seconds or 0.0) + sum((now - at).total_seconds() for _, at in running if at is not None)
    if frames <= 0 or seconds <= 0:
        return None
    return round(frames / seconds * max(len(running), 1), 2)
