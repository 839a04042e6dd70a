"""The job/chunk state machine on the real Postgres: leases, the exactly-once stitch, the reaper."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text, update

from shared import events, jobs, reaper
from shared.db import session_scope
from shared.errors import LeaseLostError, ProcessorError, WorkerLostError
from shared.models import Chunk, new_id, utcnow
from shared.options import JobOptions
from shared.progress import progress_of
from shared.states import ChunkStatus, JobStatus
from tests.support.rows import planned_job

_planned_job = planned_job


def _claim(url: str, chunk_id: str, worker: str = "w1") -> jobs.ChunkClaim | None:
    with session_scope(url) as s:
        return jobs.claim_chunk(s, chunk_id, worker=worker, family="cpu", lease_seconds=60)


def test_a_second_delivery_does_not_take_a_leased_chunk(database_url: str) -> None:
    _, (chunk_id,) = _planned_job(database_url, 1)
    assert _claim(database_url, chunk_id, "w1") is not None
    assert _claim(database_url, chunk_id, "w2") is None


def test_a_second_planner_does_not_plan_again(database_url: str) -> None:
    job_id, _ = _planned_job(database_url, 2)
    with session_scope(database_url) as s:
        assert jobs.begin_plan(s, job_id, 60) is None


def test_exactly_one_finisher_starts_the_stitch(database_url: str) -> None:
    job_id, ids = _planned_job(database_url, 24)
    claims = [_claim(database_url, c) for c in ids]
    results: list[bool] = []
    barrier = threading.Barrier(len(claims))

    def finish(claim: jobs.ChunkClaim) -> None:
        barrier.wait()
        with session_scope(database_url) as s:
            results.append(jobs.finish_chunk(s, claim, f"file:///{claim.index}.mp4", 1.0))

    threads = [threading.Thread(target=finish, args=(c,)) for c in claims if c is not None]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1
    with session_scope(database_url) as s:
        job = jobs.get_job(s, job_id)
        assert job is not None
        assert job.status == JobStatus.STITCHING
        assert job.chunks_done == 24 and job.frames_done == 240


def test_only_the_lease_holder_can_finish(database_url: str) -> None:
    _, (chunk_id,) = _planned_job(database_url, 1)
    claim = _claim(database_url, chunk_id)
    assert claim is not None
    stale = jobs.ChunkClaim(**{**claim.__dict__, "token": "not-the-holder"})
    with session_scope(database_url) as s, pytest.raises(LeaseLostError):
        jobs.finish_chunk(s, stale, "file:///x.mp4", 1.0)


def _expire(url: str, chunk_id: str) -> None:
    with session_scope(url) as s:
        s.execute(update(Chunk).where(Chunk.id == chunk_id).values(lease_expires_at=utcnow() - timedelta(seconds=1)))


def test_the_reaper_requeues_an_expired_lease_then_fails_the_job_at_the_limit(database_url: str) -> None:
    job_id, (chunk_id,) = _planned_job(database_url, 1)
    for attempt in (1, 2):
        assert _claim(database_url, chunk_id) is not None
        _expire(database_url, chunk_id)
        with session_scope(database_url) as s:
            result = reaper.reap(s, max_attempts=3, requeue_after=300, default_limit=4)
        assert (job_id, chunk_id) in result.render, f"attempt {attempt} not requeued"
    assert _claim(database_url, chunk_id) is not None
    _expire(database_url, chunk_id)
    with session_scope(database_url) as s:
        result = reaper.reap(s, max_attempts=3, requeue_after=300, default_limit=4)
        assert job_id in result.failed
        job = jobs.get_job(s, job_id)
        chunk = s.get(Chunk, chunk_id)
        assert job is not None and chunk is not None
        assert job.status == JobStatus.FAILED and job.error_code == WorkerLostError.code
        assert chunk.status == ChunkStatus.FAILED and chunk.attempts == 3


def test_a_chunk_finished_as_its_lease_expires_is_kept_and_the_reaper_does_not_wait_on_it(database_url: str) -> None:
    # finish_chunk holds the job row, then marks its chunk. The reaper must take the rows in the same order: had
    # it taken the expired chunk first, then the job (to fail it at the limit), each would wait on the other.
    job_id, (chunk_id,) = _planned_job(database_url, 1)
    claim = _claim(database_url, chunk_id)
    assert claim is not None
    _expire(database_url, chunk_id)  # the worker was late to heartbeat; its chunk is rendered all the same
    with session_scope(database_url) as finisher:
        assert jobs.lock_job(finisher, job_id) is not None  # finish_chunk's first step, its transaction open
        with session_scope(database_url) as sweep:
            sweep.execute(text("SET LOCAL lock_timeout = '20s'"))  # waiting on the finisher fails, never hangs
            swept = reaper.reclaim_expired(sweep, max_attempts=1, default_limit=4)
        assert (swept.render, swept.failed) == ([], []), "the job in hand is left to the next sweep"
        assert jobs.finish_chunk(finisher, claim, "file:///0.mp4", 1.0), "the last chunk starts the stitch"
    with session_scope(database_url) as s:
        job = jobs.get_job(s, job_id)
        assert job is not None and job.status == JobStatus.STITCHING
        assert s.get_one(Chunk, chunk_id).status == ChunkStatus.DONE
    with session_scope(database_url) as sweep:  # nothing left to reclaim once it is done
        assert reaper.reclaim_expired(sweep, max_attempts=1, default_limit=4).failed == []


def test_a_failed_attempt_is_retried_below_the_limit_and_fails_the_job_at_it(database_url: str) -> None:
    job_id, (chunk_id,) = _planned_job(database_url, 1)
    error = ProcessorError("boom")
    outcomes = []
    for _ in range(3):
        claim = _claim(database_url, chunk_id)
        assert claim is not None
        with session_scope(database_url) as s:
            outcomes.append(jobs.fail_chunk(s, claim, error, max_attempts=3, default_limit=4))
    assert [o.retry for o in outcomes] == [True, True, False]
    with session_scope(database_url) as s:
        job = jobs.get_job(s, job_id)
        assert job is not None
        assert (job.status, job.error_code, job.error_message) == (
            JobStatus.FAILED,
            "processor_failed",
            "boom",
        )


def test_a_lost_plan_message_is_sent_again(database_url: str) -> None:
    job_id = new_id()
    with session_scope(database_url) as s:
        job = jobs.create_job(
            s,
            job_id=job_id,
            options=JobOptions(),
            target_url="file:///t.mp4",
            source_urls=[],
            target_name="t",
        )
        job.enqueued_at = utcnow() - timedelta(seconds=600)
    with session_scope(database_url) as s:
        assert job_id in reaper.reap(s, max_attempts=3, requeue_after=300, default_limit=4).plan
    with session_scope(database_url) as s:  # and not again straight away
        assert job_id not in reaper.reap(s, max_attempts=3, requeue_after=300, default_limit=4).plan


def _progress(url: str, job_id: str) -> jobs.Progress:
    with session_scope(url) as s:
        job = jobs.get_job(s, job_id)
        assert job is not None
        return progress_of(s, job)


def test_a_job_is_recovering_from_a_lost_worker_until_a_worker_takes_its_work_again(database_url: str) -> None:
    job_id, (first, second) = _planned_job(database_url, 2)
    claim = _claim(database_url, first)
    assert claim is not None
    with session_scope(database_url) as s:
        jobs.heartbeat(s, claim, 5, 60)
        jobs.finish_chunk(s, claim, "file:///0.mp4", 1.0)
    lost = _claim(database_url, second)
    assert lost is not None
    assert not _progress(database_url, job_id).recovering
    assert _progress(database_url, job_id).eta_seconds is not None

    _expire(database_url, second)  # its worker stopped heartbeating: the progress it reported is stale
    overdue = _progress(database_url, job_id)
    assert overdue.recovering and overdue.eta_seconds is None
    with session_scope(database_url) as s:
        assert (job_id, second) in reaper.reap(s, max_attempts=3, requeue_after=300, default_limit=4).render
    assert _progress(database_url, job_id).recovering, "re-queued, not yet taken again"
    assert _claim(database_url, second, "w2") is not None
    assert not _progress(database_url, job_id).recovering


def test_a_chunk_done_at_last_shows_no_error_and_its_events_keep_the_failed_attempt(database_url: str) -> None:
    job_id, (chunk_id,) = _planned_job(database_url, 1)
    claim = _claim(database_url, chunk_id)
    assert claim is not None
    with session_scope(database_url) as s:
        assert jobs.fail_chunk(s, claim, ProcessorError("boom"), max_attempts=3, default_limit=4).retry
    with session_scope(database_url) as s:
        assert s.get_one(Chunk, chunk_id).error_code == "processor_failed"
    retry = _claim(database_url, chunk_id)
    assert retry is not None
    with session_scope(database_url) as s:
        jobs.finish_chunk(s, retry, "file:///0.mp4", 1.0)
    with session_scope(database_url) as s:
        chunk = s.get_one(Chunk, chunk_id)
        assert (chunk.status, chunk.error_code, chunk.error_message) == ("done", None, None)
        failed = [e for e in events.after(s, job_id) if e.kind == "chunk_failed"]
        assert [(e.attempt, e.error_code) for e in failed] == [(1, "processor_failed")]
