"""A tenant's quotas: how many of its jobs may wait for a place, and how many bytes it may keep stored.

Checked when a job is submitted, under the tenant's row lock (``shared.admission.lock_tenant``), so two racing
submissions cannot both take the last place. A refusal is a 429 with a stable code; nothing is stored for it.

A job's ``stored_bytes`` counts its inputs from submission and its output once stitched; a job stops counting when
its files are deleted (cancelled, or expired after the retention time).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from shared.errors import TooManyRequestsError
from shared.models import Job
from shared.states import WAITING_JOB_STATES, JobStatus

__all__ = ["Quotas", "add_stored", "check", "stored_bytes", "waiting_jobs"]


@dataclass(frozen=True)
class Quotas:
    max_waiting_jobs: int
    max_stored_bytes: int


def waiting_jobs(session: Session, tenant_id: str) -> int:
    """The tenant's jobs that wait: for a place, paused, or with a preview awaiting approval."""
    query = select(func.count()).select_from(Job).where(Job.tenant_id == tenant_id, Job.status.in_(WAITING_JOB_STATES))
    return int(session.scalar(query) or 0)


def stored_bytes(session: Session, tenant_id: str) -> int:
    """Bytes the tenant's jobs keep in storage: every job whose files are not deleted yet."""
    query = select(func.coalesce(func.sum(Job.stored_bytes), 0)).where(
        Job.tenant_id == tenant_id, Job.expired_at.is_(None), Job.status != JobStatus.CANCELLED
    )
    return int(session.scalar(query) or 0)


def check(session: Session, tenant_id: str, quotas: Quotas, *, new_bytes: int) -> None:
    """Refuse a new job of ``new_bytes`` bytes that would put the tenant over a quota.

    Raises:
        TooManyRequestsError: ``too_many_waiting_jobs`` or ``storage_quota_exceeded``.
    """
    waiting = waiting_jobs(session, tenant_id)
    if waiting >= quotas.max_waiting_jobs:
        raise TooManyRequestsError(
            f"{waiting} of your jobs are waiting for a place, the most allowed; submit again when some have started",
            code="too_many_waiting_jobs",
        )
    stored = stored_bytes(session, tenant_id)
    if stored + new_bytes > quotas.max_stored_bytes:
        raise TooManyRequestsError(
            f"your jobs keep {stored} bytes stored; with this job's {new_bytes} that is over the quota of "
            f"{quotas.max_stored_bytes} bytes (cancel jobs or wait for their files to expire)",
            code="storage_quota_exceeded",
        )


def add_stored(session: Session, job_id: str, size: int) -> None:
    """Count ``size`` more bytes against the job's tenant (its output, once published)."""
    session.execute(update(Job).where(Job.id == job_id).values(stored_bytes=Job.stored_bytes + size))
