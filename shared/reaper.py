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

from shared.admission import lock_tenant
from shared.broker import BrokerContents, WorkKey
from shared.errors import WorkerLostError
from shared.events import EventKind, record
from shared.lifecycle import Note, fail_job, transition
from shared.models import Chunk, Job, farm_paused_clause, utcnow
from shared.states import ACTIVE_JOB_STATES, ChunkStatus, JobStatus
from shared.tasks import PLAN, RENDER_CHUNK, STITCH, TASKS, Message

# A sender commits its rows, then sends: work queued more recently than this may simply not be sent *yet*.
SEND_GRACE = timedelta(seconds=5)


@dataclass
class ReapResult:
    """What to send once the reaper's transaction has committed."""

    plan: list[str] = field(default_factory=list)
    render: list[tuple[str, str]] = field(default_factory=list)  # (job_id, chunk_id)
    stitch: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    admitted: list[Message] = field(default_factory=list)  # the waiting jobs the failed ones made room for

    def __iadd__(self, other: ReapResult) -> ReapResult:
        self.plan += other.plan
        self.render += other.render
        self.stitch += other.stitch
        self.failed += other.failed
        self.admitted += other.admitted
        return self


def reap(session: Session, *, max_attempts: int, requeue_after: float, default_limit: int) -> ReapResult:
    """Reclaim expired leases and re-send work queued longer than ``requeue_after`` seconds, without looking into
    the broker (the sweep of a farm whose broker's contents cannot be read)."""
    result = reclaim_expired(session, max_attempts=max_attempts, default_limit=default_limit)
    result += resend_stale(session, requeue_after=requeue_after)
    return result


def _lock_owners(session: Session, now: datetime) -> None:
    """Lock the tenants of the jobs with an expired lease, in a fixed order, before any job or chunk: a job failed
    here admits its tenant's next one, and whoever else ends a job locks the tenant first too."""
    expired_chunk = select(Chunk.id).where(
        Chunk.job_id == Job.id, Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < now
    )
    tenants = session.scalars(
        select(Job.tenant_id)
        .where(Job.tenant_id.is_not(None))
        .where(
            ((Job.status == JobStatus.RENDERING) & expired_chunk.exists())
            | (Job.status.in_((JobStatus.PLANNING, JobStatus.STITCHING)) & (Job.lease_expires_at < now))
        )
        .distinct()
    ).all()
    for tenant_id in sorted(t for t in tenants if t is not None):
        lock_tenant(session, tenant_id)


def reclaim_expired(session: Session, *, max_attempts: int, default_limit: int) -> ReapResult:
    """Hand back the work of every step whose lease expired: chunks to ``queued``, plans and stitches sent again;
    past the attempt limit the job fails with the last error (and its tenant's next waiting job is admitted)."""
    now = utcnow()
    result = ReapResult()
    _lock_owners(session, now)
    # The lock order of every row change (``shared.lifecycle``): tenant, then job, then chunk. finish_chunk holds
    # the job while it marks its chunk done; taking the chunk first here, then the job (to fail it, or by the FK of
    # its event), waited on it in the opposite order: a deadlock. A job held elsewhere is skipped; the next sweep
    # finds its expired chunks again.
    held = session.scalars(
        select(Job.id)
        .where(Job.status == JobStatus.RENDERING)
        .where(
            select(Chunk.id)
            .where(Chunk.job_id == Job.id, Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < now)
            .exists()
        )
        .order_by(Job.id)
        .with_for_update(skip_locked=True)
    ).all()
    expired = (
        session.scalars(
            select(Chunk)
            .where(Chunk.job_id.in_(held))
            .where(Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < now)
            .order_by(Chunk.job_id, Chunk.index)
            .with_for_update(skip_locked=True)
        ).all()
        if held
        else []
    )
    for chunk in expired:
        # A running chunk's recorded error, if any, is an earlier attempt's: this attempt's is its lost worker.
        lost = WorkerLostError(f"worker {chunk.worker} stopped heartbeating during attempt {chunk.attempts}")
        final = chunk.attempts - chunk.attempts_at_retry >= max_attempts
        job_id, chunk_id, index = chunk.job_id, chunk.id, chunk.index
        moved = transition(
            session, Chunk, ChunkStatus.FAILED if final else ChunkStatus.QUEUED, expected=(ChunkStatus.RUNNING,),
            where=[Chunk.id == chunk_id],
            values={
                "lease_token": None, "lease_expires_at": None, "error_code": lost.code, "error_message": lost.message,
                **({} if final else {"enqueued_at": now}),
            },
            note=None if final else Note(
                EventKind.CHUNK_REQUEUED, row_attempt=True, error_code=lost.code,
                message=f"{lost.message}; chunk {index} re-queued",
            ),
        )  # fmt: skip
        if not moved:  # its job failed a moment ago, in this sweep, for another of its chunks
            continue
        if not final:
            result.render.append((job_id, chunk_id))
            continue
        ended = fail_job(session, job_id, lost, default_limit=default_limit)
        if ended.changed:
            result.failed.append(job_id)
            result.admitted += ended.messages

    abandoned = session.scalars(
        select(Job)
        .where(Job.status.in_((JobStatus.PLANNING, JobStatus.STITCHING)))
        .where(Job.lease_expires_at < now)
        .with_for_update(skip_locked=True)
    ).all()
    for job in abandoned:
        job_id, status, attempts = job.id, JobStatus(job.status), job.attempts
        step = "stitch" if status == JobStatus.STITCHING else "plan"
        if attempts >= max_attempts:
            lost = WorkerLostError(f"the {step} step was abandoned {attempts} times")
            ended = fail_job(session, job_id, lost, default_limit=default_limit)
            if ended.changed:
                result.failed.append(job_id)
                result.admitted += ended.messages
            continue
        # a stitch stays stitching (its lease cleared, for the next stitcher); a plan goes back to queued
        transition(
            session, Job, status if status == JobStatus.STITCHING else JobStatus.QUEUED, expected=(status,),
            where=[Job.id == job_id], values={"lease_token": None, "lease_expires_at": None, "enqueued_at": now},
            note=Note(
                EventKind.REQUEUED, attempt=attempts,
                message=f"the {step} step was abandoned (its worker stopped heartbeating); sent again",
            ),
        )  # fmt: skip
        (result.stitch if status == JobStatus.STITCHING else result.plan).append(job_id)
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
        return TASKS[self.key[0]].step


def queued_work(session: Session, *, queued_before: datetime) -> list[Work]:
    """Every step waiting for its message since before ``queued_before``: queued chunks of rendering jobs, queued
    jobs (their plan) and stitching jobs no stitcher holds."""
    chunks = session.execute(
        select(Chunk.id, Chunk.job_id, Chunk.index)
        .join(Job)
        .where(Job.status == JobStatus.RENDERING, ~farm_paused_clause())  # a paused job or farm: none sent
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
