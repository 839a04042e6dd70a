"""The reaper's sweep against a broker that goes away and comes back empty (a private Redis on a spare port): lost
work is re-sent as soon as the broker answers, each job hears once that the broker was unreachable, and the
database side of the sweep goes on during the outage."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select, update

from shared import jobs
from shared.broker import broker_contents, make_celery
from shared.db import session_scope
from shared.dispatch import CeleryDispatcher
from shared.models import Chunk, Job, JobEvent, utcnow
from shared.progress import progress_of
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import RENDER_CHUNK
from tests.support.rows import planned_job
from tests.support.servers import RedisServer
from workers.reaping import Reaper
from workers.runtime import Runtime

LONG_AGO = timedelta(seconds=60)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def broker_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def celery(settings: Settings) -> Iterator[Celery]:
    app = make_celery(settings)
    yield app
    app.close()


@pytest.fixture
def sweeper(settings: Settings, celery: Celery) -> Reaper:
    rt = Runtime(
        settings=settings,
        storage=Storage(settings.storage_url),
        dispatcher=CeleryDispatcher(celery),
        hostname="reaper@test",
        family="cpu",
    )
    return Reaper(rt, celery)


def _planned(url: str, chunks: int) -> tuple[str, list[str]]:
    job_id, ids = planned_job(url, chunks, family="cpu")
    with session_scope(url) as s:
        s.execute(update(Chunk).where(Chunk.job_id == job_id).values(enqueued_at=utcnow() - LONG_AGO))
    return job_id, ids


def _kinds(url: str, job_id: str) -> list[str]:
    with session_scope(url) as s:
        return list(s.scalars(select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)))


def _held_chunks(celery: Celery, ids: list[str]) -> set[str]:
    """Which of ``ids`` the broker holds render messages for (the database holds other tests' jobs too)."""
    contents = broker_contents(celery)
    assert contents is not None
    return {ident for task, ident in contents.waiting if task == RENDER_CHUNK and ident in ids}


def test_a_broker_away_then_back_empty_gets_every_queued_chunk_again_and_each_job_hears_it_once(
    settings: Settings, celery: Celery, sweeper: Reaper, redis_server: RedisServer
) -> None:
    url = settings.database_url
    job_id, ids = _planned(url, 3)
    dying, *queued = ids
    with session_scope(url) as s:
        claim = jobs.claim_chunk(s, dying, worker="w1@test", family="cpu", lease_seconds=60)
        assert claim is not None
    sweeper.sweep()
    assert _held_chunks(celery, ids) == set(queued), "queued in Postgres, never sent: sent by the first sweep"
    sweeper.sweep()
    assert _kinds(url, job_id).count("resent") == 1, "sent once, then held by the broker: nothing more to send"

    redis_server.stop()
    with session_scope(url) as s:  # the worker of the running chunk dies during the outage
        s.execute(update(Chunk).where(Chunk.id == dying).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    sweeper.sweep()
    sweeper.sweep()
    kinds = _kinds(url, job_id)
    assert kinds.count("broker_unreachable") == 1, kinds
    assert kinds.count("chunk_requeued") == 1, "leases are reclaimed while the broker is away"
    with session_scope(url) as s:
        assert progress_of(s, s.get_one(Job, job_id)).recovering

    redis_server.start()  # empty
    with session_scope(url) as s:  # past the grace a sender gets before its message counts as lost
        s.execute(update(Chunk).where(Chunk.job_id == job_id).values(enqueued_at=utcnow() - LONG_AGO))
    result = sweeper.sweep()
    assert {chunk_id for j, chunk_id in result.render if j == job_id} == set(ids)
    assert _held_chunks(celery, ids) == set(ids)
    assert _kinds(url, job_id)[-1] == "resent"
    assert not sweeper.broker_down


def _succeeded_without_deleting_its_chunks(settings: Settings, storage: Storage, finished_ago: timedelta) -> str:
    """A job rendered and stitched through the row changes a worker makes, with the files a stitcher killed right
    after publishing its output leaves: the output, and the chunk files it did not get to delete."""
    url = settings.database_url
    job_id, ids = planned_job(url, 2, family="cpu")
    for index, chunk_id in enumerate(ids):
        with session_scope(url) as s:
            claim = jobs.claim_chunk(s, chunk_id, worker="w1@test", family="cpu", lease_seconds=60)
            assert claim is not None
            chunk_url = storage.job_url(job_id, "chunks", f"{index:05d}.mp4")
            with storage.open_write(chunk_url) as file:
                file.write(b"chunk")
            jobs.finish_chunk(s, claim, chunk_url, 1.0)
    with session_scope(url) as s:
        token = jobs.begin_stitch(s, job_id, 60, worker="s1@test")
        assert token is not None
        with storage.open_write(storage.job_url(job_id, "output.mp4")) as file:
            file.write(b"output")
        assert jobs.finish_job(s, job_id, token, storage.job_url(job_id, "output.mp4"), default_limit=10).changed
        s.execute(update(Job).where(Job.id == job_id).values(finished_at=utcnow() - finished_ago))
    return job_id


def test_the_chunk_files_a_killed_stitcher_left_are_deleted_by_the_next_sweep_and_the_output_kept(
    settings: Settings, sweeper: Reaper
) -> None:
    storage = sweeper.rt.storage
    left = _succeeded_without_deleting_its_chunks(settings, storage, timedelta(seconds=settings.lease_seconds + 1))
    stitching = _succeeded_without_deleting_its_chunks(settings, storage, timedelta(0))  # its stitcher is deleting
    sweeper.sweep()
    assert storage.listdir(storage.job_url(left, "chunks")) == []
    with storage.open_read(storage.job_url(left, "output.mp4")) as file:
        assert file.read() == b"output"
    assert len(storage.listdir(storage.job_url(stitching, "chunks"))) == 2, "a live stitcher's own work"
    with session_scope(settings.database_url) as s:
        assert s.get_one(Job, left).status == "succeeded"
        assert set(s.scalars(select(Chunk.output_url).where(Chunk.job_id == left))) == {None}
