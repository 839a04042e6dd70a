"""Admission: how many of a tenant's jobs run at once, and which waiting job runs next.

A tenant's new (or retried) job is inserted ``waiting``; :func:`admit` then lets waiting jobs run while the tenant
has fewer than its limit of jobs ``queued``, ``planning``, ``rendering`` or ``stitching`` — the most urgent first,
then in the order they were submitted. The decision is taken under a lock on the tenant's row, so two callers
never admit past the limit.

Who calls it: the submission (a new job may run at once), whoever ends a job (a stitcher, a failing chunk, a
failing planner, a cancel) through :func:`release`, and the reaper for every tenant at each tick, which also
covers a process that died between ending a job and admitting the next.
"""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from shared.db import session_scope
from shared.dispatch import Dispatcher, send_all
from shared.events import EventKind, record
from shared.models import Chunk, Job, Tenant, utcnow
from shared.states import ACTIVE_JOB_STATES, ChunkStatus, JobStatus
from shared.tasks import (
    CONTROL_QUEUE,
    PLAN,
    RENDER_CHUNK,
    STITCH,
    STITCH_QUEUE,
    ChunkPayload,
    JobPayload,
    Message,
    render_queue,
)


def lock_tenant(session: Session, tenant_id: str) -> Tenant | None:
    """Take the tenant's row lock: every admission decision for the tenant is serialised on it.

    ``FOR NO KEY UPDATE``: it excludes other admissions but not the key-share lock that inserting a job (its
    foreign key) takes on the tenant row — else two submissions, each holding that lock, would wait on each other.
    Callers that change a job and then admit lock the tenant *first*, so that no two transactions take the
    tenant and job locks in opposite orders.
    """
    query = select(Tenant).where(Tenant.id == tenant_id).with_for_update(key_share=True)
    return session.scalars(query).one_or_none()


def admit(session: Session, tenant_id: str | None, default_limit: int) -> list[Message]:
    """Move waiting jobs of the tenant to their next step while it is under its limit; returns what to send.

    Jobs without a tenant (``swapfarm run``) have no limit.
    """
    query = select(Job).where(Job.status == JobStatus.WAITING)
    if tenant_id is None:
        query = query.where(Job.tenant_id.is_(None))
    else:
        tenant = lock_tenant(session, tenant_id)
        if tenant is None:
            return []
        limit = tenant.max_running_jobs or default_limit
        active = session.scalar(
            select(func.count()).select_from(Job).where(Job.tenant_id == tenant_id, Job.status.in_(ACTIVE_JOB_STATES))
        )
        room = limit - int(active or 0)
        if room <= 0:
            return []
        query = query.where(Job.tenant_id == tenant_id).limit(room)
    waiting = session.scalars(
        query.order_by(Job.priority.desc(), Job.created_at, Job.id).with_for_update(skip_locked=True)
    ).all()
    messages: list[Message] = []
    for job in waiting:
        messages += _start(session, job)
    return messages


def _start(session: Session, job: Job) -> list[Message]:
    """A waiting job's next step: planning for a new job; for a retried one, the step it failed in."""
    if job.chunks_total is None:
        target, messages = JobStatus.QUEUED, [Message(PLAN, JobPayload(job_id=job.id), CONTROL_QUEUE, job.priority)]
    else:
        pending = session.scalars(
            select(Chunk.id).where(Chunk.job_id == job.id, Chunk.status == ChunkStatus.QUEUED).order_by(Chunk.index)
        ).all()
        queue = render_queue(job.family)
        messages = [
            Message(RENDER_CHUNK, ChunkPayload(job_id=job.id, chunk_id=c), queue, job.priority) for c in pending
        ]
        target = JobStatus.RENDERING
        if not messages:  # every chunk is done: it failed while stitching
            target = JobStatus.STITCHING
            messages = [Message(STITCH, JobPayload(job_id=job.id), STITCH_QUEUE, job.priority)]
    moved = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status == JobStatus.WAITING)
        .values(status=target, attempts=0, enqueued_at=utcnow(), lease_token=None, lease_expires_at=None)
        .returning(Job.id)
    ).first()
    if moved is None:
        return []
    record(session, job.id, EventKind.ADMITTED, status=target)
    return messages


def admit_all(session: Session, default_limit: int) -> list[Message]:
    """Admit waiting jobs of every tenant that has some (the reaper's sweep)."""
    tenants = session.scalars(select(Job.tenant_id).where(Job.status == JobStatus.WAITING).distinct()).all()
    messages: list[Message] = []
    for tenant_id in sorted(tenants, key=lambda t: t or ""):
        messages += admit(session, tenant_id, default_limit)
    return messages


def release(database_url: str, dispatcher: Dispatcher, job_id: str, default_limit: int) -> None:
    """After ``job_id`` ended: admit its tenant's next waiting jobs, commit, then send their messages."""
    with session_scope(database_url) as session:
        job = session.get(Job, job_id)
        messages = admit(session, job.tenant_id, default_limit) if job is not None else []
    send_all(dispatcher, messages)
