"""A group's retry (``shared.groups.retry_group``, what ``POST /v1/groups/{id}/retry``, the console and
``swapfarm group retry`` call) on the real Postgres: only its failed members run again, the group's end is cleared,
and when the retried members end the group ends again with a second webhook."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from shared import groups, jobs, lifecycle
from shared.control import cancel_job
from shared.db import session_scope
from shared.errors import WorkerLostError
from shared.farm import Farm
from shared.models import Job, JobGroup, WebhookDelivery, new_id
from shared.options import JobOptions
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import PLAN
from shared.tenants import Principal, ensure_tenant
from tests.shared.test_control import Recorder


def _hooks(url: str, group_id: str) -> list[dict[str, int]]:
    with session_scope(url) as s:
        sent = s.scalars(
            select(WebhookDelivery).where(WebhookDelivery.job_id == group_id).order_by(WebhookDelivery.created_at)
        )
        return [d.payload["data"]["jobs"] for d in sent]


def test_a_group_retry_runs_its_failed_members_again_and_its_end_is_announced_again(
    database_url: str, tmp_path: Path
) -> None:
    settings = Settings(database_url=database_url, storage_url=f"file://{tmp_path}")
    recorder = Recorder()
    farm = Farm(settings, Storage.from_settings(settings), recorder)
    group_id = new_id()
    with session_scope(database_url) as s:
        tenant = ensure_tenant(s, f"t-{new_id()[:12]}", max_running_jobs=4)
        caller = Principal(tenant_id=tenant.id, tenant_name=tenant.name, key_id="k", admin=False)
        s.add(JobGroup(id=group_id, tenant_id=tenant.id, callback_url="https://hooks.example.com/g"))
    failed, cancelled = new_id(), new_id()
    with session_scope(database_url) as s:
        for job_id in (failed, cancelled):
            jobs.create_job(
                s, job_id=job_id, options=JobOptions(processors=["passthrough"]), target_url="file:///t.mp4",
                source_urls=[], target_name="t.mp4", tenant_id=caller.tenant_id, group_id=group_id,
            )  # fmt: skip
        lifecycle.admit(s, caller.tenant_id, 4)
    with session_scope(database_url) as s:
        lifecycle.fail_job(s, failed, WorkerLostError("the worker was lost"), default_limit=4)
        cancel_job(s, cancelled, 4)
    assert _hooks(database_url, group_id) == [{"failed": 1, "cancelled": 1}]

    assert groups.retry_group(farm, caller, group_id) == 1
    with session_scope(database_url) as s:
        group = s.get(JobGroup, group_id)
        assert group is not None and group.finished_at is None, "the group is active again"
        states = dict(s.execute(select(Job.id, Job.status).where(Job.group_id == group_id)).all())
    assert states == {failed: "queued", cancelled: "cancelled"}, "only the failed member runs again"
    assert [(task, p["job_id"]) for task, p, _ in recorder.sent] == [(PLAN, failed)]

    with session_scope(database_url) as s:  # the retried member ends: the group ends again, announced again
        cancel_job(s, failed, 4)
    assert _hooks(database_url, group_id) == [{"failed": 1, "cancelled": 1}, {"cancelled": 2}]
    assert groups.retry_group(farm, caller, group_id) == 0, "nothing failed: nothing to retry"
