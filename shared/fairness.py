"""Fair share between tenants: which queued chunk a render worker takes next.

Why not Redis: the broker holds one list per queue and priority level and serves the most urgent level across
every job of every tenant. A tenant that submits fifty urgent jobs would put its chunks ahead of everyone else's
until they all ran. So tenants' messages all share one broker level (``shared.tasks.broker_priority``), and the
order is decided here, in Postgres, when a worker claims work:

* a ``render_chunk`` message is a *token*: "one chunk of this family's queue is waiting". Each queued chunk was
  sent one; the worker that receives a token claims the *fairest* queued chunk of the same family — not
  necessarily the one the message names. When it claims another chunk and the named one is still queued, it
  sends the named chunk a new message (:func:`still_queued`): every queued chunk keeps a message naming it, which
  is what the reaper checks (``shared.reaper``), and the claimed chunk's own message, still in the broker, is a
  spare token. Tokens never run out while chunks wait, and a spare finds nothing to claim and does nothing;
* the fairest chunk: first the admin band (``ADMIN_PRIORITY``, farm-wide urgency, admin keys only); then the
  tenant with the fewest chunks rendering now (an equal share of the workers), then the tenant served longest
  ago (``tenants.last_served_at``: round robin when shares are equal — with one worker, tenants alternate); then,
  within the tenant, its most urgent job, its oldest job, the job's first chunk;
* the choice and the claim are one transaction; ``FOR UPDATE … SKIP LOCKED`` lets two workers choosing at once take
  different chunks (SQLite, for ``swapfarm run``, serialises writers instead). The tenant is marked served in a
  transaction of its own right after (:func:`mark_served`): a claim never waits on a tenant's row lock, which
  cancels and admissions take before the chunk rows.

Admission (``shared.admission``) still bounds how many jobs of a tenant run at once; fair share decides between
the chunks of the jobs admitted. Plans and stitches are short and stay first come, first served.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Integer, case, cast, func, select, update
from sqlalchemy.orm import Session

from shared import jobs, worker_health
from shared.models import Chunk, Job, Tenant, utcnow
from shared.settings import Settings
from shared.states import ChunkStatus, JobStatus
from shared.tasks import ADMIN_PRIORITY, RENDER_CHUNK, Message, message

__all__ = ["CANDIDATES", "Taker", "claim_next", "fair_order", "mark_served", "still_queued"]

CANDIDATES = 8  # chunks tried in fair order (one locked at a time) before falling back to the message's own


def fair_order(
    session: Session, family: str, limit: int = 1, skip: Sequence[str] = (), skip_jobs: Sequence[str] = ()
) -> list[str]:
    """The ids of up to ``limit`` queued chunks of rendering jobs of ``family`` (but ``skip``, and the chunks of
    ``skip_jobs``), fairest first, row-locked — skipping rows another transaction has locked, so keep ``limit`` to
    what will be claimed."""
    running = (
        select(Job.tenant_id.label("tenant_id"), func.count().label("running"))
        .select_from(Chunk)
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.status == ChunkStatus.RUNNING)
        .group_by(Job.tenant_id)
        .subquery()
    )
    urgent = case((Job.priority >= ADMIN_PRIORITY, 0), else_=1)
    query = (
        select(Chunk.id)
        .join(Job, Job.id == Chunk.job_id)
        .outerjoin(Tenant, Tenant.id == Job.tenant_id)
        .outerjoin(running, running.c.tenant_id == Job.tenant_id)
        .where(Chunk.status == ChunkStatus.QUEUED, Job.status == JobStatus.RENDERING, Job.family == family)
        .where(Chunk.id.not_in(skip) if skip else Chunk.id.is_not(None))
        .where(Job.id.not_in(skip_jobs) if skip_jobs else Job.id.is_not(None))
        .order_by(
            urgent,
            cast(func.coalesce(running.c.running, 0), Integer),
            Tenant.last_served_at.asc().nulls_first(),
            Job.priority.desc(),
            Job.created_at,
            Job.id,
            Chunk.index,
        )
        .limit(limit)
        .with_for_update(of=Chunk, skip_locked=True)
    )
    return list(session.scalars(query).all())


@dataclass(frozen=True)
class Taker:
    """The worker claiming, as the rules of ``shared.worker_health`` see it; ``None`` settings: no rules (a test's
    or ``swapfarm run``'s single process)."""

    worker: str
    family: str
    tags: str = ""
    settings: Settings | None = None


def claim_next(
    session: Session, chunk_id: str, *, worker: str, family: str, lease_seconds: float, taker: Taker | None = None
) -> jobs.ChunkClaim | None:
    """Claim the fairest queued chunk of the family of ``chunk_id``'s job (the token's queue) that the worker may
    take (``shared.worker_health``: not quarantined, not blocklisted for the job, its tags fitting, and a chunk
    that failed on it left to another live worker that could take it); when none can be claimed, ``chunk_id``
    itself (whose lease may have expired) on the same terms. ``None`` when there is nothing to render.

    The caller commits, then marks the tenant served (:func:`mark_served`).
    """
    hint = session.execute(select(Job.family).join(Chunk, Chunk.job_id == Job.id).where(Chunk.id == chunk_id)).first()
    if hint is None:
        return None
    rules = taker.settings if taker is not None else None
    refused: set[str] = set()
    if taker is not None and rules is not None:
        if worker_health.quarantined(session, worker):
            return None
        rendering = session.scalars(
            select(Job.id).where(Job.status == JobStatus.RENDERING, Job.family == hint[0])
        ).all()
        refused = worker_health.untakeable_jobs(session, rules, worker=worker, tags=taker.tags, job_ids=rendering)

    def leave_to_others(candidate: str) -> bool:  # soft fail: it failed here, and another worker could take it
        if rules is None:
            return False
        row = session.execute(select(Chunk.job_id, Chunk.worker, Chunk.attempts).where(Chunk.id == candidate)).one()
        return row[1] == worker and row[2] > 0 and worker_health.others_can_take(session, rules, row[0], worker)

    claim = None
    tried: list[str] = []
    while claim is None and len(tried) < CANDIDATES:
        fairest = fair_order(session, hint[0], skip=tried, skip_jobs=sorted(refused))
        if not fairest:
            break
        tried += fairest
        if leave_to_others(fairest[0]):
            continue
        claim = jobs.claim_chunk(session, fairest[0], worker=worker, family=family, lease_seconds=lease_seconds)
    if claim is None and chunk_id not in tried:
        named_job = session.scalar(select(Chunk.job_id).where(Chunk.id == chunk_id))
        if named_job not in refused and not leave_to_others(chunk_id):
            claim = jobs.claim_chunk(session, chunk_id, worker=worker, family=family, lease_seconds=lease_seconds)
    if claim is not None and rules is not None:
        worker_health.clear_wait(session, claim.job_id)
    return claim


def mark_served(session: Session, job_id: str) -> None:
    """Record that the tenant of ``job_id`` was just served (a chunk of its was claimed)."""
    tenant_id = select(Job.tenant_id).where(Job.id == job_id).scalar_subquery()
    session.execute(update(Tenant).where(Tenant.id == tenant_id).values(last_served_at=utcnow()))


def still_queued(session: Session, chunk_id: str) -> Message | None:
    """A new message for chunk ``chunk_id`` when it is still queued in a rendering job (a token naming it was spent
    on a fairer chunk, so it needs another); ``None`` otherwise."""
    row = session.execute(
        select(Job.id, Job.family, Job.priority)
        .join(Chunk, Chunk.job_id == Job.id)
        .where(Chunk.id == chunk_id, Chunk.status == ChunkStatus.QUEUED, Job.status == JobStatus.RENDERING)
    ).first()
    if row is None:
        return None
    return message(RENDER_CHUNK, row[0], chunk_id=chunk_id, family=row[1], priority=int(row[2]))
