"""Pause, resume, preview approval and the farm's pause on the real Postgres (no workers: the state machine)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from shared import control, jobs, lifecycle, previewing, quotas, reaper
from shared.db import session_scope
from shared.errors import NotAwaitingApprovalError, NotFoundError
from shared.farm import Farm
from shared.models import Chunk, FarmControl, Job, JobEvent, WebhookDelivery, new_id, utcnow
from shared.options import JobOptions
from shared.settings import Settings
from shared.states import JOB_TRANSITIONS, JobStatus
from shared.storage import Storage
from shared.tasks import PLAN, RENDER_CHUNK, STITCH
from shared.tenants import Principal, ensure_tenant
from tests.shared.test_control import Recorder


def _tenant(url: str, limit: int) -> str:
    with session_scope(url) as s:
        return ensure_tenant(s, f"t-{new_id()[:12]}", max_running_jobs=limit).id


def _job(url: str, tenant_id: str, **options: object) -> str:
    job_id = new_id()
    with session_scope(url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"], **options),  # type: ignore[arg-type]
            target_url="file:///t.mp4", source_urls=[], target_name="t.mp4", tenant_id=tenant_id,
        )  # fmt: skip
        lifecycle.admit(s, tenant_id, 4)
    return job_id


def _status(url: str, job_id: str) -> str:
    with session_scope(url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        return job.status


def _plan(url: str, job_id: str, chunks: int, preview: tuple[int, ...] = ()) -> list[str]:
    with session_scope(url) as s:
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
    plans = [jobs.ChunkPlan(i, i * 10, i * 10 + 10, i / 3, preview=i in preview) for i in range(chunks)]
    with session_scope(url) as s:
        jobs.record_plan(s, job_id, token, plans, {}, "any")
        return list(s.scalars(select(Chunk.id).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _render(url: str, chunk_id: str) -> None:
    with session_scope(url) as s:
        claim = jobs.claim_chunk(s, chunk_id, worker="w", family="cpu", lease_seconds=60)
        assert claim is not None, chunk_id
    with session_scope(url) as s:
        jobs.finish_chunk(s, claim, f"file:///c/{chunk_id}.mp4", 0.1)


def test_the_lifecycle_table_holds_pause_and_approval() -> None:
    assert JOB_TRANSITIONS[JobStatus.PAUSED] == {JobStatus.WAITING, JobStatus.FAILED, JobStatus.CANCELLED}
    assert JOB_TRANSITIONS[JobStatus.AWAITING_APPROVAL] == {JobStatus.WAITING, JobStatus.CANCELLED}
    assert JobStatus.PAUSED not in JOB_TRANSITIONS[JobStatus.STITCHING], "a stitch finishes"
    for ended in (JobStatus.SUCCEEDED, JobStatus.CANCELLED):
        assert JobStatus.PAUSED not in JOB_TRANSITIONS[ended]


def test_a_paused_job_frees_its_place_counts_as_waiting_and_its_chunks_are_neither_claimed_nor_resent(
    database_url: str,
) -> None:
    tenant = _tenant(database_url, 1)
    first = _job(database_url, tenant)
    chunk_ids = _plan(database_url, first, 3)
    _render(database_url, chunk_ids[0])
    second = _job(database_url, tenant)
    assert _status(database_url, second) == "waiting"

    with session_scope(database_url) as s:
        outcome = control.pause_job(s, first, 4)
    assert outcome.changed and [(m.task, m.payload.job_id) for m in outcome.messages] == [(PLAN, second)]
    assert (_status(database_url, first), _status(database_url, second)) == ("paused", "queued")
    with session_scope(database_url) as s:
        assert quotas.waiting_jobs(s, tenant) == 1  # the paused one
        assert jobs.claim_chunk(s, chunk_ids[1], worker="w", family="cpu", lease_seconds=60) is None
        later = utcnow() + timedelta(hours=1)
        assert not [w for w in reaper.queued_work(s, queued_before=later) if w.job_id == first]

    with session_scope(database_url) as s:
        resumed = control.resume_job(s, first, 4, preview_ttl_seconds=3600)
    assert resumed.changed and resumed.messages == [], "the tenant's place is taken: it waits"
    assert _status(database_url, first) == "waiting"
    with session_scope(database_url) as s:
        messages = control.cancel_job(s, second, 4).messages  # its place goes to the resumed job
    assert [(m.task, m.payload.chunk_id) for m in messages] == [(RENDER_CHUNK, c) for c in chunk_ids[1:]]
    assert _status(database_url, first) == "rendering"


def test_a_job_paused_with_all_its_chunks_done_stitches_on_resume_and_a_stitching_or_ended_one_does_not_pause(
    database_url: str,
) -> None:
    tenant = _tenant(database_url, 4)
    job_id = _job(database_url, tenant)
    chunk_ids = _plan(database_url, job_id, 2)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, chunk_ids[1], worker="w", family="cpu", lease_seconds=60)
    _render(database_url, chunk_ids[0])
    with session_scope(database_url) as s:
        assert control.pause_job(s, job_id, 4).changed
    assert claim is not None
    with session_scope(database_url) as s:  # the running chunk finishes while the job is paused
        assert jobs.finish_chunk(s, claim, "file:///c/1.mp4", 0.1) is False, "no stitch while paused"
    with session_scope(database_url) as s:
        messages = control.resume_job(s, job_id, 4, preview_ttl_seconds=3600).messages
    assert [m.task for m in messages] == [STITCH] and _status(database_url, job_id) == "stitching"
    with session_scope(database_url) as s:
        assert not control.pause_job(s, job_id, 4).changed
        s.execute(update(Job).where(Job.id == job_id).values(status="succeeded"))
    with session_scope(database_url) as s:
        assert not control.pause_job(s, job_id, 4).changed


def test_start_paused_waits_for_resume_then_for_admission(database_url: str) -> None:
    tenant = _tenant(database_url, 4)
    job_id = _job(database_url, tenant, start_paused=True)
    assert _status(database_url, job_id) == "paused"
    with session_scope(database_url) as s:
        messages = control.resume_job(s, job_id, 4, preview_ttl_seconds=3600).messages
    assert [(m.task, m.payload.job_id) for m in messages] == [(PLAN, job_id)]


def test_a_preview_holds_the_other_chunks_until_approved_and_approval_renders_only_them(database_url: str) -> None:
    tenant = _tenant(database_url, 4)
    job_id = _job(database_url, tenant, preview=2)
    chunk_ids = _plan(database_url, job_id, 5, preview=(1, 3))
    with session_scope(database_url) as s:
        states = {i: st for i, st in s.execute(select(Chunk.index, Chunk.status).where(Chunk.job_id == job_id))}
    assert states == {0: "held", 1: "queued", 2: "held", 3: "queued", 4: "held"}
    with session_scope(database_url) as s:
        assert jobs.claim_chunk(s, chunk_ids[0], worker="w", family="cpu", lease_seconds=60) is None
    _render(database_url, chunk_ids[1])
    with session_scope(database_url) as s:
        assert not previewing.preview_rendered(s, job_id)
    _render(database_url, chunk_ids[3])
    with session_scope(database_url) as s:
        assert previewing.await_approval(s, job_id, 3600)
    assert _status(database_url, job_id) == "awaiting_approval"
    with session_scope(database_url) as s:
        assert not control.pause_job(s, job_id, 4).changed
        outcome = control.approve_job(s, job_id, 4)
    assert [m.payload.chunk_id for m in outcome.messages] == [chunk_ids[i] for i in (0, 2, 4)]
    assert _status(database_url, job_id) == "rendering"
    with session_scope(database_url) as s:
        assert not control.approve_job(s, job_id, 4).changed


def test_a_preview_past_its_deadline_is_cancelled(database_url: str) -> None:
    tenant = _tenant(database_url, 4)
    job_id = _job(database_url, tenant, preview=1)
    chunk_ids = _plan(database_url, job_id, 2, preview=(0,))
    _render(database_url, chunk_ids[0])
    with session_scope(database_url) as s:
        assert previewing.await_approval(s, job_id, 3600)
    with session_scope(database_url) as s:
        assert job_id not in control.expire_previews(s, 4)[0], "not yet due"
        s.execute(update(Job).where(Job.id == job_id).values(approval_due_at=utcnow() - timedelta(seconds=1)))
    with session_scope(database_url) as s:
        assert job_id in control.expire_previews(s, 4)[0]
    assert _status(database_url, job_id) == "cancelled"
    with session_scope(database_url) as s:
        assert set(s.scalars(select(Chunk.status).where(Chunk.job_id == job_id))) == {"done", "cancelled"}


def test_a_paused_farm_starts_no_chunk_and_its_resume_sends_the_queued_ones_again(
    database_url: str, tmp_path: Path
) -> None:
    tenant = _tenant(database_url, 4)
    job_id = _job(database_url, tenant)
    chunk_ids = _plan(database_url, job_id, 2)
    recorder = Recorder()
    settings = Settings(database_url=database_url, storage_url=f"file://{tmp_path}")
    farm = Farm(settings, Storage.from_settings(settings), recorder)
    admin = Principal(tenant_id=tenant, tenant_name="t", key_id="k", admin=True)
    try:
        control.pause_farm(farm, admin)
        with session_scope(database_url) as s:
            assert control.farm_paused(s)
            assert jobs.claim_chunk(s, chunk_ids[0], worker="w", family="cpu", lease_seconds=60) is None
            later = utcnow() + timedelta(hours=1)
            assert not [w for w in reaper.queued_work(s, queued_before=later) if w.job_id == job_id]
    finally:
        control.resume_farm(farm, admin)
    sent = [p["chunk_id"] for task, p, _ in recorder.sent if task == RENDER_CHUNK and p["job_id"] == job_id]
    assert sent == chunk_ids
    with session_scope(database_url) as s:
        assert not control.farm_paused(s)
        assert s.get(FarmControl, 1) is not None


def test_a_preview_ready_is_announced_by_its_webhook(database_url: str) -> None:
    tenant = _tenant(database_url, 4)
    job_id = new_id()
    with session_scope(database_url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"], preview=1), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4", tenant_id=tenant, callback_url="https://hooks.example.com/x",
        )  # fmt: skip
        lifecycle.admit(s, tenant, 4)
    chunk_ids = _plan(database_url, job_id, 2, preview=(1,))
    _render(database_url, chunk_ids[1])
    with session_scope(database_url) as s:
        assert previewing.await_approval(s, job_id, 3600)
    with session_scope(database_url) as s:
        sent = s.execute(select(WebhookDelivery).where(WebhookDelivery.job_id == job_id)).scalars().all()
        assert [(d.event_type, d.payload["data"]["links"]["approve"]) for d in sent] == [
            ("job.awaiting_approval", f"/v1/jobs/{job_id}/approve")
        ]


def test_reject_cancels_a_preview_and_deletes_its_files_and_is_refused_in_another_state(
    database_url: str, tmp_path: Path
) -> None:
    tenant = _tenant(database_url, 4)
    job_id = _job(database_url, tenant, preview=1)
    chunk_ids = _plan(database_url, job_id, 2, preview=(0,))
    settings = Settings(database_url=database_url, storage_url=f"file://{tmp_path}")
    farm = Farm(settings, Storage.from_settings(settings), Recorder())
    caller = Principal(tenant_id=tenant, tenant_name="t", key_id="k", admin=False)
    with pytest.raises(NotAwaitingApprovalError):
        control.reject(farm, caller, job_id)  # still rendering its preview
    _render(database_url, chunk_ids[0])
    with session_scope(database_url) as s:
        assert previewing.await_approval(s, job_id, 3600)
    kept = tmp_path / "jobs" / job_id / "stills" / "00-after.jpg"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"\xff\xd8")
    other = Principal(tenant_id=_tenant(database_url, 4), tenant_name="o", key_id="k2", admin=False)
    with pytest.raises(NotFoundError):
        control.reject(farm, other, job_id)
    control.reject(farm, caller, job_id)
    assert _status(database_url, job_id) == "cancelled" and not kept.exists()
    with pytest.raises(NotAwaitingApprovalError):
        control.approve(farm, caller, job_id)


def _announced(url: str, job_id: str) -> tuple[bool, list[str], list[str]]:
    """Whether the job has a deadline, its ``awaiting_approval`` events and its webhooks' types."""
    with session_scope(url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        events = s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id, JobEvent.kind == "awaiting_approval"))
        hooks = s.scalars(select(WebhookDelivery.event_type).where(WebhookDelivery.job_id == job_id))
        return job.approval_due_at is not None, list(events), list(hooks)


def _hooked_preview(url: str, tenant: str) -> tuple[str, list[str]]:
    job_id = new_id()
    with session_scope(url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"], preview=1), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4", tenant_id=tenant, callback_url="https://hooks.example.com/x",
        )  # fmt: skip
        lifecycle.admit(s, tenant, 4)
    return job_id, _plan(url, job_id, 2, preview=(1,))


def test_a_preview_finished_while_paused_awaits_approval_on_resume_with_its_deadline_event_and_webhook(
    database_url: str,
) -> None:
    tenant = _tenant(database_url, 4)
    job_id, chunk_ids = _hooked_preview(database_url, tenant)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, chunk_ids[1], worker="w", family="cpu", lease_seconds=60)
    assert claim is not None
    with session_scope(database_url) as s:
        assert control.pause_job(s, job_id, 4).changed
    with session_scope(database_url) as s:  # the preview's chunk finishes while the job is paused
        jobs.finish_chunk(s, claim, "file:///c/1.mp4", 0.1)
    with session_scope(database_url) as s:
        assert not previewing.await_approval(s, job_id, 3600), "a paused job stays paused"
    with session_scope(database_url) as s:
        assert control.resume_job(s, job_id, 4, preview_ttl_seconds=3600).messages == []
    assert _status(database_url, job_id) == "awaiting_approval"
    assert _announced(database_url, job_id) == (True, ["awaiting_approval"], ["job.awaiting_approval"])


def test_a_preview_finished_while_its_resumed_job_waits_for_a_place_awaits_approval_at_once(
    database_url: str,
) -> None:
    tenant = _tenant(database_url, 1)
    job_id, chunk_ids = _hooked_preview(database_url, tenant)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, chunk_ids[1], worker="w", family="cpu", lease_seconds=60)
        assert claim is not None and control.pause_job(s, job_id, 4).changed
    other = _job(database_url, tenant)  # takes the tenant's one place
    with session_scope(database_url) as s:
        control.resume_job(s, job_id, 1, preview_ttl_seconds=3600)
    assert _status(database_url, job_id) == "waiting"
    with session_scope(database_url) as s:
        jobs.finish_chunk(s, claim, "file:///c/1.mp4", 0.1)
    with session_scope(database_url) as s:  # the worker that finished the preview's last chunk
        assert previewing.await_approval(s, job_id, 3600)
    assert _status(database_url, job_id) == "awaiting_approval"
    assert _announced(database_url, job_id) == (True, ["awaiting_approval"], ["job.awaiting_approval"])
    with session_scope(database_url) as s:
        messages = control.cancel_job(s, other, 1).messages
    assert messages == [] and _status(database_url, job_id) == "awaiting_approval", "it needs no place"
