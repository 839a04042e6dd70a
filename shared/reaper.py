"""The reaper's decisions: which abandoned or lost work goes back to the queues. Postgres is the source of truth.

Two kinds of work need the reaper:

* **abandoned** — a step's lease expired: its worker stopped heartbeating (killed, frozen, cut off). The chunk goes
  back to ``queued`` (or the job fails past the attempt limit), the plan or stitch is sent again
  (:func:`reclaim_expired`);
* **lost** — Postgres says the work is queued, but no message for it exists: the broker restarted empty, or a
  sender could not reach it. :func:`missing` compares what Postgres says is queued with what the broker holds
  (``shared.broker.broker_contents``) and :func:`resend` sends what is missing again. Where the broker's
  contents cannot be read, :func:`resend_stale` re-sends whatever waited longer than ``requeue_after``.

Re-sending is always safe: every step claims its row first, so a message delivered twice does its work once.
Each function records its events in the caller's transaction; callers commit, then send what it returned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared import jobs
from shared.broker import BrokerContents, WorkKey
from shared.events import EventKind, record
from shared.models import Chunk, Job, utcnow
from shared.states import ACTIVE_JOB_STATES, ChunkStatus, JobStatus
from shared.tasks import PLAN, RENDER_CHUNK, STITCH

# A sender commits its rows, then sends: work queued more recently than this may simply not be sent *yet*.
SEND_GRACE = timedelta(seconds=5)


@dataclass
class ReapResult:
    """What to send once the reaper's transaction has committed."""

    plan: list[str] = field(default_factory=list)
    render: list[tuple[str, str]] = field(default_factory=list)  # (job_id, chunk_id)
    stitch: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def __iadd__(self, other: ReapResult) -> ReapResult:
        self.plan += other.plan
        self.render += other.render
        self.stitch += other.stitch
        self.failed += other.failed
        return self


def reap(session: Session, *, max_attempts: int, requeue_after: float) -> ReapResult:
    """Reclaim expired leases and re-send work queued longer than ``requeue_after`` seconds, without looking into
    the broker (the sweep of a farm whose broker's contents cannot be read)."""
    result = reclaim_expired(session, max_attempts=max_attempts)
    result += resend_stale(session, requeue_after=requeue_after)
    return result


def reclaim_expired(session: Session, *, max_attempts: int) -> ReapResult:
    """Hand back the work of every step whose lease expired: chunks to ``queued``, plans and stitches sent again;
    past the attempt limit the job fails with the last error."""
    now = utcnow()
    result = ReapResult()
    expired = session.scalars(
        select(Chunk)
        .join(Job)
        .where(Job.status == JobStatus.RENDERING)
        .where(Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < now)
        .with_for_update(of=Chunk, skip_locked=True)
    ).all()
    for chunk in expired:
        # A running chunk's recorded error, if any, is an earlier attempt's: this attempt's is its lost worker.
        chunk.lease_token, chunk.lease_expires_at = None, None
        chunk.error_code = jobs.WORKER_LOST
        chunk.error_message = f"worker {chunk.worker} stopped heartbeating during attempt {chunk.attempts}"
        if chunk.attempts - chunk.attempts_at_retry >= max_attempts:
            chunk.status = ChunkStatus.FAILED
            if jobs.fail_job(session, chunk.job_id, chunk.error_code, chunk.error_message or ""):
                result.failed.append(chunk.job_id)
        else:
            chunk.status = ChunkStatus.QUEUED
            chunk.enqueued_at = now
            result.render.append((chunk.job_id, chunk.id))
            record(
                session, chunk.job_id, EventKind.CHUNK_REQUEUED, chunk_index=chunk.index, attempt=chunk.attempts,
                worker=chunk.worker, error_code=chunk.error_code,
                message=f"{chunk.error_message}; chunk {chunk.index} re-queued",
            )  # fmt: skip

    abandoned = session.scalars(
        select(Job)
        .where(Job.status.in_((JobStatus.PLANNING, JobStatus.STITCHING)))
        .where(Job.lease_expires_at < now)
        .with_for_update(skip_locked=True)
    ).all()
    for job in abandoned:
        step = "stitch" if job.status == JobStatus.STITCHING else "plan"
        if job.attempts >= max_attempts:
            if jobs.fail_job(session, job.id, jobs.WORKER_LOST, f"the {step} step was abandoned {job.attempts} times"):
                result.failed.append(job.id)
            continue
        job.lease_token, job.lease_expires_at, job.enqueued_at = None, None, now
        if job.status == JobStatus.STITCHING:
            result.stitch.append(job.id)
        else:
            job.status = JobStatus.QUEUED
            result.plan.append(job.id)
        record(
            session, job.id, EventKind.REQUEUED, status=job.status, attempt=job.attempts,
            message=f"the {step} step was abandoned (its worker stopped heartbeating); sent again",
        )  # fmt: skip
    session.flush()
    return result


@dataclass(frozen=True)
class Work:
    """A step Postgres says is queued, waiting for its message to be delivered."""

    key: WorkKey
    job_id: str
    chunk_index: int | None = None

    @property
    def step(self) -> str:
        return {PLAN: "plan", RENDER_CHUNK: "render", STITCH: "stitch"}[self.key[0]]


def queued_work(session: Session, *, queued_before: datetime) -> list[Work]:
    """Every step waiting for its message since before ``queued_before``: queued chunks of rendering jobs, queued
    jobs (their plan) and stitching jobs no stitcher holds."""
    chunks = session.execute(
        select(Chunk.id, Chunk.job_id, Chunk.index)
        .join(Job)
        .where(Job.status == JobStatus.RENDERING)
        .where(Chunk.status == ChunkStatus.QUEUED, Chunk.enqueued_at < queued_before)
    ).all()
    steps = session.execute(
        select(Job.id, Job.status)
        .where(
            (Job.status == JobStatus.QUEUED) | ((Job.status == JobStatus.STITCHING) & Job.lease_expires_at.is_(None))
        )
        .where(Job.enqueued_at < queued_before)
    ).all()
    work = [Work((RENDER_CHUNK, chunk_id), job_id, index) for chunk_id, job_id, index in chunks]
    work += [Work((STITCH if status == JobStatus.STITCHING else PLAN, job_id), job_id) for job_id, status in steps]
    return work


def missing(session: Session, contents: BrokerContents, *, taken_within: float) -> list[Work]:
    """The queued work the broker holds no message for (older than :data:`SEND_GRACE`).

    A message a worker took more than ``taken_within`` seconds ago without claiming its work counts as missing:
    that worker died or hangs, and the broker would only hand the message out again after the visibility timeout.
    """
    now = utcnow()
    taken_since = (now - timedelta(seconds=taken_within)).timestamp()
    return [
        work
        for work in queued_work(session, queued_before=now - SEND_GRACE)
        if not contents.holds(work.key, taken_since=taken_since)
    ]


def resend(session: Session, work: Sequence[Work]) -> ReapResult:
    """Send ``work`` again (found missing from the broker): each row still waiting is marked sent now, and each
    job gets one ``resent`` event saying what was sent again. Rows that moved on meanwhile are left alone."""
    now = utcnow()
    cutoff = now - SEND_GRACE
    result = ReapResult()
    chunk_ids = [w.key[1] for w in work if w.key[0] == RENDER_CHUNK]
    job_ids = [w.key[1] for w in work if w.key[0] != RENDER_CHUNK]
    sent: Counter[tuple[str, str]] = Counter()
    if chunk_ids:
        for chunk in session.scalars(
            select(Chunk)
            .join(Job)
            .where(Chunk.id.in_(chunk_ids), Chunk.status == ChunkStatus.QUEUED, Chunk.enqueued_at < cutoff)
            .where(Job.status == JobStatus.RENDERING)
            .with_for_update(of=Chunk, skip_locked=True)
        ):
            chunk.enqueued_at = now
            result.render.append((chunk.job_id, chunk.id))
            sent[(chunk.job_id, "render")] += 1
    if job_ids:
        for job in session.scalars(
            select(Job)
            .where(Job.id.in_(job_ids), Job.enqueued_at < cutoff)
            .where(
                (Job.status == JobStatus.QUEUED)
                | ((Job.status == JobStatus.STITCHING) & Job.lease_expires_at.is_(None))
            )
            .with_for_update(skip_locked=True)
        ):
            job.enqueued_at = now
            if job.status == JobStatus.STITCHING:
                result.stitch.append(job.id)
                sent[(job.id, "stitch")] += 1
            else:
                result.plan.append(job.id)
                sent[(job.id, "plan")] += 1
    for job_id in dict.fromkeys(job_id for job_id, _ in sent):
        counts = {step: sent[(job_id, step)] for step in ("plan", "render", "stitch") if sent[(job_id, step)]}
        what = " and ".join(
            f"{n} chunk{'s' if n != 1 else ''}" if step == "render" else f"the {step}" for step, n in counts.items()
        )
        whose = "its message" if sum(counts.values()) == 1 else "their messages"
        record(session, job_id, EventKind.RESENT, message=f"{what} re-sent: the broker no longer held {whose}")
    session.flush()
    return result


def resend_stale(session: Session, *, requeue_after: float) -> ReapResult:
    """Re-send every step queued longer than ``requeue_after`` seconds: the fallback where the broker's contents
    cannot be read, so a lost message is only assumed, after a long wait."""
    now = utcnow()
    work = queued_work(session, queued_before=now - timedelta(seconds=requeue_after))
    result = ReapResult()
    chunk_ids = [w.key[1] for w in work if w.key[0] == RENDER_CHUNK]
    if chunk_ids:
        for chunk in session.scalars(
            select(Chunk).where(Chunk.id.in_(chunk_ids)).with_for_update(of=Chunk, skip_locked=True)
        ):
            chunk.enqueued_at = now
            result.render.append((chunk.job_id, chunk.id))
    job_ids = [w.key[1] for w in work if w.key[0] != RENDER_CHUNK]
    if job_ids:
        for job in session.scalars(select(Job).where(Job.id.in_(job_ids)).with_for_update(skip_locked=True)):
            job.enqueued_at = now
            (result.stitch if job.status == JobStatus.STITCHING else result.plan).append(job.id)
    session.flush()
    return result


def note_broker_unreachable(session: Session, reason: str) -> list[str]:
    """Tell every job that has not ended that the broker does not answer (one ``broker_unreachable`` event each,
    which also marks its progress as recovering); returns their ids."""
    ids = list(session.scalars(select(Job.id).where(Job.status.in_(ACTIVE_JOB_STATES))))
    for job_id in ids:
        record(
            session, job_id, EventKind.BROKER_UNREACHABLE,
            message=f"the broker does not answer ({reason}); queued work waits for it and is re-sent when it is back",
        )  # fmt: skip
    return ids


def overdue_leases(session: Session) -> int:
    """Running chunks whose lease has expired: their worker stopped heartbeating and the reaper has yet to act."""
    now = utcnow()
    count = session.scalar(
        select(func.count()).select_from(Chunk).where(Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < now)
    )
    return int(count or 0)
