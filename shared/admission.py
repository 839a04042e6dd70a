"""Admission: how many of a tenant's jobs run at once, and which waiting job runs next.

A tenant's new (or retried) job is inserted ``waiting``; :func:`admissible` picks the waiting jobs that may run
while the tenant has fewer than its limit of jobs ``queued``, ``planning``, ``rendering`` or ``stitching`` — the
most urgent first, then in the order they were submitted — and ``shared.lifecycle.admit`` moves them to their next
step. The decision is taken under a lock on the tenant's row, so two callers never admit past the limit.

Who admits: the submission (a new job may run at once), whoever ends a job (a stitcher, a failing chunk, a failing
planner, a cancel: ``shared.lifecycle.end_job``, in the transaction that ends it), and the reaper for every tenant
at each tick, a safety net under the others.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared.models import Job, Tenant
from shared.states import ACTIVE_JOB_STATES, JobStatus


def lock_tenant(session: Session, tenant_id: str) -> Tenant | None:
    """Take the tenant's row lock: every admission decision for the tenant is serialised on it.

    ``FOR NO KEY UPDATE``: it excludes other admissions but not the key-share lock that inserting a job (its
    foreign key) takes on the tenant row — else two submissions, each holding that lock, would wait on each other.
    Callers that change a job and then admit lock the tenant *first*, so that no two transactions take the
    tenant and job locks in opposite orders.
    """
    query = select(Tenant).where(Tenant.id == tenant_id).with_for_update(key_share=True)
    return session.scalars(query).one_or_none()


def admissible(session: Session, tenant_id: str | None, default_limit: int) -> Sequence[Job]:
    """The tenant's waiting jobs that fit under its limit now, in the order they start, row-locked.

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
    return session.scalars(
        query.order_by(Job.priority.desc(), Job.created_at, Job.id).with_for_update(skip_locked=True)
    ).all()


def waiting_tenants(session: Session) -> list[str | None]:
    """The tenants with waiting jobs (``None``: the jobs without one), in a fixed order (the lock order)."""
    tenants = session.scalars(select(Job.tenant_id).where(Job.status == JobStatus.WAITING).distinct()).all()
    return sorted(tenants, key=lambda t: t or "")
