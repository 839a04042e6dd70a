"""The steps' changes of jobs and chunks, each one transition (``shared.lifecycle``) in the caller's transaction.

Workers change rows only through these functions and ``shared.control`` (what users do), so the rules live in one
place:

* a step *claims* its row with a lease (a random token and an expiry); a second delivery of the same task finds
  the lease held and does nothing;
* only the lease holder may finish its step (``WHERE lease_token = :token``);
* the call that finishes the last chunk moves the job to ``stitching`` — decided under the job row's lock, so
  exactly one caller sees it and enqueues the stitch;
* the reaper (``shared.reaper``) hands expired leases and lost messages back to the queues, and fails a job past
  the attempt limit with the last error;
* each change records its event in the job's log (``shared.events``) in the same transaction, and a change that
  ends a job admits its tenant's next waiting jobs there too (``shared.lifecycle.end_job``).

Callers commit, then enqueue what the function returned (Postgres first, Redis second). A job's progress is
``shared.progress``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, select, update
from sqlalchemy.orm import Session

from shared.errors import InputError, LeaseLostError, SwapfarmError, public_message
from shared.events import EventKind, record
from shared.lifecycle import Note, Outcome, end_job, fail_job, lock_owner, transition
from shared.models import Chunk, Job, farm_paused_clause, utcnow
from shared.options import JobOptions
from shared.settings import Settings
from shared.states import ChunkStatus, JobStatus
from shared.tasks import DEFAULT_PRIORITY, Message
from shared.worker_health import Health, join_tags, record_failure

__all__ = [
    "ChunkClaim", "ChunkPlan", "FailOutcome", "Outcome", "begin_plan", "begin_stitch",
    "chunk_outputs", "claim_chunk", "create_job", "extend_job_lease", "fail_chunk", "fail_job", "finish_chunk",
    "finish_job", "get_job", "heartbeat", "lock_job", "record_plan",
]  # fmt: skip


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
    group_id: str | None = None,
    audio_url: str | None = None,
    audio_media: dict[str, Any] | None = None,
) -> Job:
    """Insert a job: ``queued`` when it has no tenant, else ``waiting`` for admission (``shared.admission``).

    Raises:
        sqlalchemy.exc.IntegrityError: the tenant already has a job with this idempotency key (at flush).
    """
    status = JobStatus.QUEUED if tenant_id is None else JobStatus.WAITING
    if options.start_paused:  # it waits for ``resume`` (``shared.control``), then for admission
        status = JobStatus.PAUSED
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
        required_tags=join_tags(options.required_tags),
        group_id=group_id,
        audio_url=audio_url,
        audio_media=audio_media,
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
    claimed = transition(
        session, Job, JobStatus.PLANNING, expected=(JobStatus.QUEUED, JobStatus.PLANNING),
        where=[Job.id == job_id, (Job.status == JobStatus.QUEUED) | (Job.lease_expires_at < now)],
        values={
            "lease_token": token, "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "attempts": Job.attempts + 1, "started_at": func.coalesce(Job.started_at, now),
        },
        note=Note(EventKind.PLANNING, worker=worker, row_attempt=True),
    )  # fmt: skip
    return token if claimed else None


@dataclass(frozen=True)
class ChunkPlan:
    index: int
    frame_start: int
    frame_end: int  # exclusive
    seek_seconds: float
    lead_frames: int = 0  # frames decoded before frame_start (a look-behind), from lead_seek_seconds
    lead_seek_seconds: float | None = None
    preview: bool = False  # a preview frame's chunk (``workers.previews``)


def record_plan(
    session: Session,
    job_id: str,
    token: str,
    chunks: Sequence[ChunkPlan],
    media: dict[str, Any],
    family: str,
) -> list[str]:
    """Insert the chunk rows and move the job to ``rendering``; returns the chunk ids to enqueue.

    A plan with preview chunks renders those first: the others are ``held`` until the preview is approved.

    Raises:
        LeaseLostError: the planner's lease was taken over (it ran past its lease).
    """
    job = lock_job(session, job_id)
    if job is None or job.lease_token != token or job.status != JobStatus.PLANNING:
        raise LeaseLostError(f"job {job_id}: planning lease lost")
    now = utcnow()
    previewed = any(c.preview for c in chunks)
    rows = [
        Chunk(
            job_id=job_id,
            index=c.index,
            frame_start=c.frame_start,
            frame_end=c.frame_end,
            seek_seconds=c.seek_seconds,
            lead_frames=c.lead_frames,
            lead_seek_seconds=c.lead_seek_seconds,
            preview=c.preview,
            status=ChunkStatus.QUEUED if c.preview or not previewed else ChunkStatus.HELD,
            enqueued_at=now,
        )
        for c in chunks
    ]
    session.add_all(rows)
    session.flush()
    frames_total = sum(c.frame_end - c.frame_start for c in chunks)
    transition(
        session, Job, JobStatus.RENDERING, expected=(JobStatus.PLANNING,), where=[Job.id == job_id],
        values={
            "lease_token": None, "lease_expires_at": None, "attempts": 0, "media": media, "family": family,
            "frames_total": frames_total, "chunks_total": len(rows),
        },
        note=Note(EventKind.PLANNED, message=f"{frames_total} frames in {len(rows)} chunks"),
    )  # fmt: skip
    return [r.id for r in rows if r.status == ChunkStatus.QUEUED]


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
    lead_frames: int = 0  # see ChunkPlan
    lead_seek_seconds: float | None = None


def claim_chunk(
    session: Session, chunk_id: str, *, worker: str, family: str, lease_seconds: float
) -> ChunkClaim | None:
    """Take the chunk's lease; ``None`` if it is done, held by a live lease, or its job is not rendering."""
    now, token = utcnow(), _token()
    job_rendering = select(Job.id).where(Job.id == Chunk.job_id, Job.status == JobStatus.RENDERING).exists()
    rendering = and_(
        job_rendering, ~farm_paused_clause()
    )  # a paused farm starts no chunk (``shared.control.pause_farm``)
    moved = transition(
        session, Chunk, ChunkStatus.RUNNING, expected=(ChunkStatus.QUEUED, ChunkStatus.RUNNING),
        where=[Chunk.id == chunk_id, (Chunk.status == ChunkStatus.QUEUED) | (Chunk.lease_expires_at < now), rendering],
        values={
            "lease_token": token, "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "attempts": Chunk.attempts + 1, "worker": worker, "family": family, "started_at": now, "frames_done": 0,
        },
        note=Note(EventKind.CHUNK_STARTED, row_attempt=True),
        returning=(Chunk.frame_start, Chunk.frame_end, Chunk.seek_seconds, Chunk.lead_frames, Chunk.lead_seek_seconds),
    )  # fmt: skip
    if not moved:
        return None
    row = moved[0]
    start, end, seek, lead, lead_seek = row.extra
    assert row.index is not None
    return ChunkClaim(chunk_id, row.job_id, token, row.index, start, end, seek, row.attempts, worker, lead, lead_seek)


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


def finish_chunk(session: Session, claim: ChunkClaim, output_url: str, seconds: float, *, detail: str = "") -> bool:
    """Mark the chunk done; returns ``True`` for exactly one caller: the one that finished the last chunk.
    ``detail``: what the ``chunk_done`` event adds to the frames and seconds (how the frames were rendered).

    Raises:
        LeaseLostError: the chunk was taken over or cancelled while this worker rendered it.
    """
    job = lock_job(session, claim.job_id)
    frames = claim.frame_end - claim.frame_start
    done = transition(
        session, Chunk, ChunkStatus.DONE, expected=(ChunkStatus.RUNNING,),
        where=[Chunk.id == claim.chunk_id, Chunk.lease_token == claim.token],
        values={
            "output_url": output_url, "finished_at": utcnow(), "render_seconds": seconds, "frames_done": frames,
            "lease_token": None, "lease_expires_at": None,
            # An earlier attempt's error is history once the chunk is done: the job's events keep it.
            "error_code": None, "error_message": None,
        },
        note=Note(
            EventKind.CHUNK_DONE, attempt=claim.attempt,
            message=f"{frames} frames in {seconds:.1f}s" + (f"; {detail}" if detail else ""),
        ),
    )  # fmt: skip
    if not done or job is None:
        raise LeaseLostError(f"chunk {claim.chunk_id}: lease lost before it was marked done")
    # Counted in SQL, not read-modify-write: on SQLite the row lock above is a no-op, the write lock is not.
    counted = session.execute(
        update(Job)
        .where(Job.id == claim.job_id)
        .values(chunks_done=Job.chunks_done + 1, frames_done=Job.frames_done + frames)
        .returning(Job.chunks_done, Job.chunks_total)
    ).one()
    if counted[0] < (counted[1] or 0):
        return False
    moved = transition(
        session, Job, JobStatus.STITCHING, expected=(JobStatus.RENDERING,), where=[Job.id == claim.job_id],
        values={"attempts": 0, "enqueued_at": utcnow()}, note=Note(EventKind.STITCH_READY),
    )  # fmt: skip
    return bool(moved)


@dataclass(frozen=True)
class FailOutcome:
    retry: bool
    job_failed: bool
    messages: list[Message] = field(default_factory=list)  # the admissions the failed job made possible
    health: Health = field(default_factory=Health)  # what the failure did to the worker


def fail_chunk(
    session: Session,
    claim: ChunkClaim,
    error: SwapfarmError,
    max_attempts: int,
    *,
    default_limit: int,
    settings: Settings | None = None,
) -> FailOutcome:
    """Record a failed attempt: back to ``queued`` below the limit, else the chunk and its job fail. With
    ``settings``, it counts against the worker and the job's ``max_failed_chunks`` (``shared.worker_health``)."""
    lock_owner(session, claim.job_id)  # the tenant before the chunk: failing the job admits the next
    # then the job, then the chunk: the order of finish_chunk and the reaper (``shared.lifecycle``), so that failing
    # the job below never waits on a transaction that holds the job and waits for this chunk
    job = lock_job(session, claim.job_id)
    chunk = session.get(Chunk, claim.chunk_id, with_for_update=True)
    if chunk is None or chunk.lease_token != claim.token or chunk.status != ChunkStatus.RUNNING:
        return FailOutcome(retry=False, job_failed=False)
    health = record_failure(session, settings, chunk, job, error) if settings is not None else Health()
    too_many = health.too_many is not None
    final = isinstance(error, InputError) or too_many or chunk.attempts - chunk.attempts_at_retry >= max_attempts
    transition(
        session, Chunk, ChunkStatus.FAILED if final else ChunkStatus.QUEUED, expected=(ChunkStatus.RUNNING,),
        where=[Chunk.id == claim.chunk_id, Chunk.lease_token == claim.token],
        values={
            "error_code": error.code, "error_message": public_message(error.message), "lease_token": None,
            "lease_expires_at": None, **({} if final else {"enqueued_at": utcnow()}),
        },
        note=Note(
            EventKind.CHUNK_FAILED, row_attempt=True, error_code=error.code,
            message=f"{error.message} ({'no more attempts' if final else 'will retry'})",
        ),
    )  # fmt: skip
    if not final:
        return FailOutcome(retry=True, job_failed=False, health=health)
    failed = fail_job(session, claim.job_id, health.too_many or error, default_limit=default_limit)
    return FailOutcome(retry=False, job_failed=failed.changed, messages=failed.messages, health=health)


# -- stitch -----------------------------------------------------------------------------------------------


def begin_stitch(session: Session, job_id: str, lease_seconds: float, *, worker: str | None = None) -> str | None:
    now, token = utcnow(), _token()
    claimed = transition(
        session, Job, JobStatus.STITCHING, expected=(JobStatus.STITCHING,),
        where=[Job.id == job_id, Job.lease_expires_at.is_(None) | (Job.lease_expires_at < now)],
        values={
            "lease_token": token, "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "attempts": Job.attempts + 1,
        },
        note=Note(EventKind.STITCH_STARTED, worker=worker, row_attempt=True),
    )  # fmt: skip
    return token if claimed else None


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


def finish_job(session: Session, job_id: str, token: str, output_url: str, *, default_limit: int) -> Outcome:
    """The stitch published the output: the job succeeded (under the stitcher's lease) and its place goes to its
    tenant's next waiting job (the messages to send)."""
    return end_job(
        session, job_id, JobStatus.SUCCEEDED, expected=(JobStatus.STITCHING,), where=[Job.lease_token == token],
        values={"output_url": output_url, "error_code": None, "error_message": None},
        note=Note(EventKind.SUCCEEDED), default_limit=default_limit,
    )  # fmt: skip
