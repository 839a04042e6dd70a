"""Fair share on the real Postgres: which queued chunk a worker's claim takes (``shared.fairness``).

Each test's jobs get a family of their own, so chunks other tests left queued in the shared database never compete.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import select, update

from shared import fairness, jobs, lifecycle
from shared.db import session_scope
from shared.jobs import ChunkPlan
from shared.models import Chunk, Job, new_id
from shared.options import JobOptions
from shared.tasks import ADMIN_PRIORITY, ChunkPayload
from shared.tenants import ensure_tenant


@pytest.fixture
def family() -> str:
    return f"f{new_id()[:12]}"


def _tenant(url: str) -> str:
    with session_scope(url) as s:
        return ensure_tenant(s, f"t-{new_id()[:12]}", max_running_jobs=100).id


def _rendering_job(url: str, tenant_id: str, family: str, priority: int, chunks: int) -> str:
    """A job of the tenant, admitted and planned into ``chunks`` one-frame chunks, all queued."""
    job_id = new_id()
    with session_scope(url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"]), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4", tenant_id=tenant_id, priority=priority,
        )  # fmt: skip
        lifecycle.admit(s, tenant_id, 100)
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
        plan = [ChunkPlan(i, i, i + 1, i / 30) for i in range(chunks)]
        jobs.record_plan(s, job_id, token, plan, {}, family)
        s.execute(update(Job).where(Job.id == job_id).values(family=family))
    return job_id


def _any_queued(url: str, family: str) -> str | None:
    with session_scope(url) as s:
        return s.scalar(select(Chunk.id).join(Job).where(Job.family == family, Chunk.status == "queued").limit(1))


def _render_one_at_a_time(url: str, family: str) -> Iterator[str]:
    """What one worker does: take a token, claim, render (finish at once), mark the tenant served; the job ids."""
    while (token := _any_queued(url, family)) is not None:
        with session_scope(url) as s:
            claim = fairness.claim_next(s, token, worker="w1", family="cpu", lease_seconds=60)
            assert claim is not None
        with session_scope(url) as s:
            fairness.mark_served(s, claim.job_id)
        with session_scope(url) as s:
            jobs.finish_chunk(s, claim, "file:///c.mp4", 0.1)
        yield claim.job_id


def test_tenants_take_turns_whatever_their_priorities_and_the_admin_band_goes_first(
    database_url: str, family: str
) -> None:
    busy, quiet, admin = _tenant(database_url), _tenant(database_url), _tenant(database_url)
    urgent_jobs = [_rendering_job(database_url, busy, family, priority=9, chunks=3) for _ in range(3)]
    modest = _rendering_job(database_url, quiet, family, priority=1, chunks=3)
    farm_wide = _rendering_job(database_url, admin, family, priority=ADMIN_PRIORITY, chunks=1)

    order = list(_render_one_at_a_time(database_url, family))
    assert len(order) == 13
    assert order[0] == farm_wide, "the admin band before every tenant's work"
    modest_turns = [i for i, job in enumerate(order) if job == modest]
    assert modest_turns == [2, 4, 6], f"the quiet tenant alternates with the busy one: {order}"
    busy_order = [job for job in order if job in urgent_jobs]
    assert busy_order == [urgent_jobs[0]] * 3 + [urgent_jobs[1]] * 3 + [urgent_jobs[2]] * 3, "a tenant's own: in order"


def test_a_tenants_most_urgent_job_goes_first_among_its_own(database_url: str, family: str) -> None:
    tenant = _tenant(database_url)
    low = _rendering_job(database_url, tenant, family, priority=1, chunks=2)
    high = _rendering_job(database_url, tenant, family, priority=9, chunks=2)
    assert list(_render_one_at_a_time(database_url, family)) == [high, high, low, low]


def test_workers_claiming_at_once_take_different_chunks(database_url: str, family: str) -> None:
    tenant = _tenant(database_url)
    _rendering_job(database_url, tenant, family, priority=5, chunks=6)
    token = _any_queued(database_url, family)
    assert token is not None
    barrier = threading.Barrier(6)
    claimed: list[str] = []

    def claim() -> None:
        barrier.wait()
        with session_scope(database_url) as s:
            found = fairness.claim_next(
                s, token, worker=threading.current_thread().name, family="cpu", lease_seconds=60
            )
            if found is not None:
                claimed.append(found.chunk_id)

    threads = [threading.Thread(target=claim, name=f"w{i}") for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == len(set(claimed)) == 6, claimed


def test_a_token_spent_on_a_fairer_chunk_leaves_its_own_chunk_a_queue_to_be_sent_to(
    database_url: str, family: str
) -> None:
    urgent, modest = _tenant(database_url), _tenant(database_url)
    flood = _rendering_job(database_url, urgent, family, 9, 2)
    other = _rendering_job(database_url, modest, family, 1, 1)
    with session_scope(database_url) as s:
        named = s.scalar(select(Chunk.id).where(Chunk.job_id == flood, Chunk.index == 0))
        assert named is not None
        fairness.mark_served(s, flood)  # the flood's tenant was served last: the other tenant's turn
    with session_scope(database_url) as s:
        claim = fairness.claim_next(s, named, worker="w1", family="cpu", lease_seconds=60)
        assert claim is not None and claim.job_id == other
        again = fairness.still_queued(s, named)
        assert again is not None and (again.queue, again.priority) == (f"render.{family}", 9)
        assert again.payload == ChunkPayload(job_id=again.payload.job_id, chunk_id=named)
        assert fairness.still_queued(s, claim.chunk_id) is None, "the claimed chunk is running, not queued"
