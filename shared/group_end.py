"""A job group's end: when its last member ends, the group is finished and its webhook queued, once.

Called by ``shared.lifecycle.end_job`` in the transaction that ended the member (``shared.groups`` makes groups).
The group's event (``group_finished``) and its webhook deliveries are logged under the group's id.
"""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from shared.events import EventKind, record
from shared.models import Job, JobGroup, Tenant, WebhookDelivery, utcnow
from shared.states import FINISHED_JOB_STATES

GROUP_FINISHED = "group.finished"


def member_ended(session: Session, job_id: str) -> None:
    """A job ended: when it was its group's last member to, the group is finished and its webhook queued, once
    (a conditional UPDATE decides it), in the caller's transaction."""
    group_id = session.scalar(select(Job.group_id).where(Job.id == job_id))
    if group_id is None:
        return
    open_members = session.scalar(
        select(func.count()).where(Job.group_id == group_id, Job.status.not_in(list(FINISHED_JOB_STATES)))
    )
    if open_members:
        return
    now = utcnow()
    done = session.execute(
        update(JobGroup)
        .where(JobGroup.id == group_id, JobGroup.finished_at.is_(None))
        .values(finished_at=now)
        .returning(JobGroup.callback_url, JobGroup.tenant_id)
    ).first()
    if done is None:
        return
    counts = dict(
        session.execute(select(Job.status, func.count()).where(Job.group_id == group_id).group_by(Job.status)).all()
    )
    record(session, group_id, EventKind.GROUP_FINISHED, message=_summary(counts))
    url, tenant_id = done
    if not url:
        return
    tenant = session.scalar(select(Tenant.name).where(Tenant.id == tenant_id)) if tenant_id else None
    data: dict[str, Any] = {
        "id": group_id,
        "tenant": tenant,
        "jobs": {str(k): int(v) for k, v in counts.items()},
        "finished_at": now.isoformat().replace("+00:00", "Z"),
        "links": {"group": f"/v1/groups/{group_id}", "output": f"/v1/groups/{group_id}/output"},
    }
    session.add(
        WebhookDelivery(
            id=uuid.uuid4().hex, job_id=group_id, tenant_id=tenant_id, event_type=GROUP_FINISHED, url=url,
            payload={"type": GROUP_FINISHED, "timestamp": data["finished_at"], "data": data}, status="pending",
            attempts=0, next_attempt_at=now, created_at=now,
        )
    )  # fmt: skip


def _summary(counts: dict[Any, Any]) -> str:
    return "all jobs ended: " + ", ".join(f"{int(n)} {status}" for status, n in sorted(counts.items()))
