"""Tenants' limits, cancel, retry, expiry and the event log on the real Postgres (no workers: the state machine)."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

from pydantic import BaseModel
from sqlalchemy import func, select, update

from shared import control, events, jobs, lifecycle
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import FfmpegError, ProcessorError
from shared.models import ApiKey, Chunk, Job, new_id, utcnow
from shared.options import JobOptions
from shared.states import ACTIVE_JOB_STATES
from shared.tasks import PLAN, RENDER_CHUNK, STITCH
from shared.tenants import authenticate, create_key, ensure_tenant, list_keys, revoke_key


class Recorder:
    """A dispatcher that keeps what it was given: the boundary between Postgres and the queues."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, str], int | None]] = []

    def send(
        self,
        task: str,
        payload: BaseModel,
        *,
        queue: str,
        countdown: float | None = None,
        priority: int | None = None,
    ) -> None:
        self.sent.append((task, payload.model_dump(), priority))


def _tenant(url: str, limit: int | None) -> str:
    with session_scope(url) as s:
        return ensure_tenant(s, f"t-{new_id()[:12]}", max_running_jobs=limit).id


def _submit(url: str, tenant_id: str, priority: int = 5, default_limit: int = 4) -> tuple[str, list[str]]:
    job_id = new_id()
    with session_scope(url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"]), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4", tenant_id=tenant_id, priority=priority,
        )  # fmt: skip
        admitted = lifecycle.admit(s, tenant_id, default_limit)
    return job_id, [m.payload.job_id for m in admitted]


def _status(url: str, job_id: str) -> str:
    with session_scope(url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        return job.status


def _kinds(url: str, job_id: str) -> list[str]:
    with session_scope(url) as s:
        return [e.kind for e in events.after(s, job_id)]


def test_a_tenant_runs_its_limit_of_jobs_and_the_rest_wait_most_urgent_then_oldest(database_url: str) -> None:
    tenant = _tenant(database_url, 2)
    first, admitted_1 = _submit(database_url, tenant)
    second, admitted_2 = _submit(database_url, tenant)
    third, admitted_3 = _submit(database_url, tenant, priority=5)
    urgent, admitted_4 = _submit(database_url, tenant, priority=8)
    assert (admitted_1, admitted_2, admitted_3, admitted_4) == ([first], [second], [], [])
    assert [_status(database_url, j) for j in (first, second, third, urgent)] == [
        "queued", "queued", "waiting", "waiting"
    ]  # fmt: skip

    sent = Recorder()
    with session_scope(database_url) as s:
        failed = jobs.fail_job(s, first, ProcessorError("boom"), default_limit=4)
        assert failed.changed
    send_all(sent, failed.messages)  # after the commit that ended the job and admitted the next
    assert sent.sent == [(PLAN, {"job_id": urgent}, 8)], "the more urgent job goes first"

    with session_scope(database_url) as s:
        assert control.cancel_job(s, second, default_limit=4).messages[0].payload.job_id == third
    assert _status(database_url, third) == "queued"
    assert _kinds(database_url, third) == ["submitted", "admitted"]


def test_racing_admissions_never_pass_the_limit(database_url: str) -> None:
    tenant = _tenant(database_url, 3)
    barrier = threading.Barrier(12)

    def submit() -> None:
        barrier.wait()
        _submit(database_url, tenant)

    threads = [threading.Thread(target=submit) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with session_scope(database_url) as s:
        active = s.scalar(
            select(func.count()).select_from(Job).where(Job.tenant_id == tenant, Job.status.in_(ACTIVE_JOB_STATES))
        )
    assert active == 3


def _planned(url: str, tenant_id: str, chunks: int) -> tuple[str, list[str]]:
    job_id, _ = _submit(url, tenant_id)
    with session_scope(url) as s:
        token = jobs.begin_plan(s, job_id, 60, worker="w0")
        assert token is not None
        plans = [jobs.ChunkPlan(i, i * 10, i * 10 + 10, i / 3) for i in range(chunks)]
        ids = jobs.record_plan(s, job_id, token, plans, {}, "any")
    return job_id, ids


def test_cancel_drops_queued_chunks_and_stops_the_running_one_at_its_next_heartbeat(database_url: str) -> None:
    job_id, (running, queued) = _planned(database_url, _tenant(database_url, None), 2)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, running, worker="w1", family="cpu", lease_seconds=60)
    assert claim is not None
    with session_scope(database_url) as s:
        assert control.cancel_job(s, job_id, default_limit=4).changed
    with session_scope(database_url) as s:
        assert not jobs.heartbeat(s, claim, 5, 60), "the render must stop"
        assert jobs.claim_chunk(s, queued, worker="w2", family="cpu", lease_seconds=60) is None
        assert {c.status for c in s.scalars(select(Chunk).where(Chunk.job_id == job_id))} == {"cancelled"}
        assert not control.cancel_job(s, job_id, default_limit=4).changed, "cancelled is final"
    assert _kinds(database_url, job_id)[-1] == "cancelled"


def test_retry_renders_only_the_chunks_not_done_with_a_fresh_attempt_budget(database_url: str) -> None:
    job_id, (done_id, failing_id) = _planned(database_url, _tenant(database_url, None), 2)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, done_id, worker="w1", family="cpu", lease_seconds=60)
        assert claim is not None
        jobs.finish_chunk(s, claim, "file:///0.mp4", 1.0)
    for _ in range(3):
        with session_scope(database_url) as s:
            claim = jobs.claim_chunk(s, failing_id, worker="w1", family="cpu", lease_seconds=60)
            assert claim is not None
            jobs.fail_chunk(s, claim, ProcessorError("boom"), max_attempts=3, default_limit=4)
    assert _status(database_url, job_id) == "failed"

    with session_scope(database_url) as s:
        outcome = control.retry_job(s, job_id, default_limit=4)
    assert [(m.task, m.payload.model_dump()) for m in outcome.messages] == [
        (RENDER_CHUNK, {"job_id": job_id, "chunk_id": failing_id})
    ]
    with session_scope(database_url) as s:
        job = s.get(Job, job_id)
        failing = s.get(Chunk, failing_id)
        assert job is not None and failing is not None
        assert (job.status, job.retries, job.error_code) == ("rendering", 1, None)
        assert (failing.status, failing.attempts, failing.attempts_at_retry) == ("queued", 3, 3)
        claim = jobs.claim_chunk(s, failing_id, worker="w2", family="cpu", lease_seconds=60)
        assert claim is not None and claim.attempt == 4
        # one failure after the retry is below the limit again: retried, not failed
        assert jobs.fail_chunk(s, claim, ProcessorError("again"), max_attempts=3, default_limit=4).retry
    kinds = _kinds(database_url, job_id)
    assert kinds.count("chunk_failed") == 4 and "retried" in kinds and kinds.count("admitted") == 2


def test_a_job_that_failed_while_stitching_is_retried_by_stitching_again(database_url: str) -> None:
    job_id, (chunk_id,) = _planned(database_url, _tenant(database_url, None), 1)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, chunk_id, worker="w1", family="cpu", lease_seconds=60)
        assert claim is not None
        assert jobs.finish_chunk(s, claim, "file:///0.mp4", 1.0)
        jobs.fail_job(s, job_id, FfmpegError("stitch broke"), default_limit=4)
    with session_scope(database_url) as s:
        outcome = control.retry_job(s, job_id, default_limit=4)
    assert [m.task for m in outcome.messages] == [STITCH]
    assert _status(database_url, job_id) == "stitching"


def test_finished_jobs_expire_after_the_retention_time_and_cannot_be_retried(database_url: str) -> None:
    job_id, _ = _planned(database_url, _tenant(database_url, None), 1)
    with session_scope(database_url) as s:
        jobs.fail_job(s, job_id, ProcessorError("boom"), default_limit=4)
        s.execute(update(Job).where(Job.id == job_id).values(finished_at=utcnow() - timedelta(hours=2)))
    with session_scope(database_url) as s:
        assert job_id in control.expire_due(s, ttl_seconds=3600)
        assert not control.retry_job(s, job_id, default_limit=4, ttl_seconds=3600).changed, "past the retention"
    with session_scope(database_url) as s:
        assert job_id in control.expire_due(s, ttl_seconds=3600), "due until its files are deleted"
        assert control.mark_expired(s, job_id, 3600)
        assert not control.mark_expired(s, job_id, 3600), "expired once"
        assert job_id not in control.expire_due(s, ttl_seconds=3600)
    with session_scope(database_url) as s:
        assert not control.retry_job(s, job_id, default_limit=4).changed
    assert _kinds(database_url, job_id)[-1] == "expired"


def test_every_change_of_a_job_is_in_its_event_log_with_workers_and_errors(database_url: str) -> None:
    job_id, (chunk_id,) = _planned(database_url, _tenant(database_url, None), 1)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, chunk_id, worker="w1@host", family="cpu", lease_seconds=60)
        assert claim is not None
        jobs.fail_chunk(s, claim, ProcessorError("boom"), max_attempts=3, default_limit=4)
    with session_scope(database_url) as s:
        claim = jobs.claim_chunk(s, chunk_id, worker="w2@host", family="cpu", lease_seconds=60)
        assert claim is not None
        assert jobs.finish_chunk(s, claim, "file:///0.mp4", 1.0)
        token = jobs.begin_stitch(s, job_id, 60, worker="w3@host")
        assert token is not None
        assert jobs.finish_job(s, job_id, token, "file:///out.mp4", default_limit=4).changed
    with session_scope(database_url) as s:
        log = [(e.kind, e.status, e.chunk_index, e.attempt, e.worker, e.error_code) for e in events.after(s, job_id)]
    assert log == [
        ("submitted", "waiting", None, None, None, None),
        ("admitted", "queued", None, None, None, None),
        ("planning", "planning", None, 1, "w0", None),
        ("planned", "rendering", None, None, None, None),
        ("chunk_started", None, 0, 1, "w1@host", None),
        ("chunk_failed", None, 0, 1, "w1@host", "processor_failed"),
        ("chunk_started", None, 0, 2, "w2@host", None),
        ("chunk_done", None, 0, 2, "w2@host", None),
        ("stitch_ready", "stitching", None, None, None, None),
        ("stitch_started", "stitching", None, 1, "w3@host", None),
        ("succeeded", "succeeded", None, None, None, None),
    ]


def test_keys_are_stored_hashed_and_a_revoked_key_stops_at_once(database_url: str) -> None:
    tenant = f"t-{new_id()[:12]}"
    with session_scope(database_url) as s:
        created = create_key(s, tenant, name="ci")
    with session_scope(database_url) as s:
        found = authenticate(s, created.key)
        assert found is not None and found.tenant_name == tenant and not found.admin
        listed = list_keys(s, tenant)
        assert [k.id for k in listed] == [created.info.id]
        row = s.get_one(ApiKey, created.info.id)
        assert row.key_hash == hashlib.sha256(created.key.encode()).hexdigest()
        assert created.key not in {row.key_hash, row.prefix, row.name}, "the key itself is never stored"
    with session_scope(database_url) as s:
        revoke_key(s, created.info.prefix)
    with session_scope(database_url) as s:
        assert authenticate(s, created.key) is None
        assert authenticate(s, created.key + "x") is None
