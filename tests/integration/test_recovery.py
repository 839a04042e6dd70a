"""Recovery, seen from the user's side: a broker that comes back empty, a job submitted while it is away, a worker
killed mid-chunk at the default lease, a broker with persistence restarted — on a farm of its own (Postgres and
Redis on spare ports, two workers, the reaper). Every job ends with every frame, each chunk counted once, and
its events tell what happened.

How fast recovery is lives in ``benchmarks/recovery.py``; waits here only guard against hangs. A fault lasts until
the farm has seen it (an event, a log line, no chunk left running), not for a fixed time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shared.db import engine_for, session_scope
from shared.models import Chunk, Job, JobEvent
from shared.schema import upgrade
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.faults import slow_chunks
from tests.support.media import assert_frames_match, make_clip, read_frames
from tests.support.servers import PostgresServer, RedisServer

pytestmark = pytest.mark.integration

LOSSLESS: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def database_url(private_postgres: PostgresServer) -> Iterator[str]:
    url = private_postgres.create_database(f"swapfarm_{uuid.uuid4().hex[:10]}")
    upgrade(url)
    yield url
    engine_for(url).dispose()


@pytest.fixture
def redis_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis.log", appendonly=getattr(request, "param", False))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def broker_url(redis_server: RedisServer) -> str:
    return redis_server.url


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _events(settings: Settings, job_id: str, kind: str | None = None) -> list[JobEvent]:
    with session_scope(settings.database_url) as s:
        query = select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
        rows = list(s.scalars(query if kind is None else query.where(JobEvent.kind == kind)))
    return rows


def _done(settings: Settings, job_id: str) -> int:
    return sum(c.status == "done" for c in _chunks(settings, job_id))


def _assert_whole_and_counted_once(settings: Settings, api: TestClient, job_id: str, clip: Path, out: Path) -> None:
    with session_scope(settings.database_url) as s:
        job = s.get_one(Job, job_id)
        chunks = list(s.scalars(select(Chunk).where(Chunk.job_id == job_id)))
    assert all(c.status == "done" and c.frames_done == c.frame_count for c in chunks)
    assert job.chunks_done == job.chunks_total == len(chunks)
    assert job.frames_done == job.frames_total == sum(c.frame_count for c in chunks)
    assert_frames_match(read_frames(download(api, job_id, out)), read_frames(clip))


def _two_workers_and_the_reaper(farm: Farm, env: dict[str, str] | None = None) -> None:
    farm.worker("w1", env=env)
    farm.worker("w2", env=env)
    farm.beat()


def _slow_chunks(folder: Path) -> dict[str, str]:
    """Workers whose chunk encodes start half a second late: tiny chunks that still last long enough for a fault to
    find work queued and running, without the CPU of big frames."""
    return slow_chunks(folder, 0.5)


# -- 1. the broker restarts empty mid-job -----------------------------------------------------------------------


def _resent_chunks(settings: Settings, job_id: str) -> int:
    """Chunks the ``resent`` events of the job say were sent again."""
    return sum(
        int(event.message.split(" chunk", 1)[0])
        for event in _events(settings, job_id, "resent")
        if event.message.split(" ", 1)[0].isdigit()
    )


def test_a_broker_back_empty_gets_the_lost_chunks_resent_and_the_job_ends_whole(
    farm: Farm, api: TestClient, settings: Settings, redis_server: RedisServer, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=8, size="64x64", rate="15")  # 120 frames: 8 chunks
    _two_workers_and_the_reaper(farm, _slow_chunks(tmp_path / "bin"))
    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 16})
    wait_for(lambda: _done(settings, job_id) >= 2, timeout=180, what="two chunks done")

    redis_server.stop()  # no persistence: every queued message is gone
    # The outage lasts until the reaper has told the job and every chunk that was rendering has ended (its worker
    # cannot take another): the farm has then lived through the whole outage, whatever its length in seconds.
    wait_for(lambda: _events(settings, job_id, "broker_unreachable"), timeout=60, what="the outage noticed")
    assert any(c.status == "queued" for c in _chunks(settings, job_id)), "the job should still have queued work"
    wait_for(lambda: all(c.status != "running" for c in _chunks(settings, job_id)), timeout=60, what="no chunk running")
    queued = sum(c.status == "queued" for c in _chunks(settings, job_id))
    progress = api.get(f"/v1/jobs/{job_id}").json()["progress"]
    assert progress["recovering"] is True and progress["eta_seconds"] is None, progress
    redis_server.start()

    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    assert body["progress"]["recovering"] is False
    assert _resent_chunks(settings, job_id) == queued, [e.message for e in _events(settings, job_id, "resent")]
    assert "re-sending render" in farm.log("beat")
    _assert_whole_and_counted_once(settings, api, job_id, clip, tmp_path / "out.mp4")


# -- 2. a job submitted while the broker is away ----------------------------------------------------------------


def test_a_job_submitted_while_the_broker_is_away_is_accepted_and_sent_once_it_is_back(
    farm: Farm, api: TestClient, settings: Settings, redis_server: RedisServer, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=2, size="64x64", rate="15")
    _two_workers_and_the_reaper(farm)
    wait_for(lambda: farm.log("w2").count(" ready.") and farm.log("w1").count(" ready."), timeout=120, what="workers")
    redis_server.stop()

    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 15})  # accepted: Postgres holds it
    body = api.get(f"/v1/jobs/{job_id}").json()
    assert body["status"] == "queued" and body["progress"]["recovering"] is True, body
    (unreachable, *_) = _events(settings, job_id, "broker_unreachable")
    assert "broker does not answer" in unreachable.message
    # The job waits out the outage: the reaper's sweeps find the broker away too, and nothing takes the job.
    wait_for(lambda: "the broker does not answer" in farm.log("beat"), timeout=60, what="the reaper seeing the outage")
    assert api.get(f"/v1/jobs/{job_id}").json()["status"] == "queued"
    redis_server.start()

    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    kinds = [e.kind for e in _events(settings, job_id)]
    assert kinds.index("resent") < kinds.index("planning"), kinds
    assert "the plan re-sent" in _events(settings, job_id, "resent")[0].message
    _assert_whole_and_counted_once(settings, api, job_id, clip, tmp_path / "out.mp4")


# -- 3. a worker killed mid-chunk, at the default lease and heartbeat -------------------------------------------


class TestWorkerKilledAtDefaults:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        defaults = {
            name: Settings.model_fields[name].default
            for name in ("lease_seconds", "heartbeat_seconds", "reap_interval_seconds")
        }
        return settings.model_copy(update=defaults)

    def test_the_chunk_of_a_killed_worker_is_requeued_with_an_event_and_its_error_cleared_once_done(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        assert settings.lease_seconds == 15 and settings.heartbeat_seconds == 3
        clip = make_clip(tmp_path / "clip.mp4", seconds=4, size="64x64", rate="15")  # 3 chunks of 20 frames
        # Each chunk's encode starts two seconds late: a chunk is still rendering when the kill comes, with no CPU
        # spent on it (the wait for the dead worker's lease is what this test is about).
        _two_workers_and_the_reaper(farm, slow_chunks(tmp_path / "bin", 2))
        job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 20})
        host = "w1@test"

        def running_on_w1() -> Chunk | None:
            return next((c for c in _chunks(settings, job_id) if c.status == "running" and c.worker == host), None)

        chunk = wait_for(running_on_w1, timeout=180, what="a chunk rendering on w1")
        assert isinstance(chunk, Chunk)
        farm.kill("w1")
        after = next(c for c in _chunks(settings, job_id) if c.id == chunk.id)
        assert after.status == "running" and after.attempts == chunk.attempts, "killed mid-chunk"

        requeued = wait_for(
            lambda: _events(settings, job_id, "chunk_requeued"), timeout=120, what="the chunk re-queued"
        )
        assert isinstance(requeued, list)
        (event,) = requeued
        assert (event.chunk_index, event.worker, event.error_code) == (chunk.index, host, "worker_lost")
        assert f"worker {host} stopped heartbeating" in event.message and "re-queued" in event.message

        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        done = next(c for c in _chunks(settings, job_id) if c.id == chunk.id)
        assert done.attempts == chunk.attempts + 1 and done.worker == "w2@test"
        listed = api.get(f"/v1/jobs/{job_id}/chunks").json()["chunks"]
        assert listed[chunk.index]["error"] is None, "a chunk that succeeded shows no old error"
        _assert_whole_and_counted_once(settings, api, job_id, clip, tmp_path / "out.mp4")


# -- 4. a broker with persistence restarted mid-job -------------------------------------------------------------


@pytest.mark.parametrize("redis_server", [True], indirect=True, ids=["appendonly"])
def test_a_broker_with_an_append_only_file_restarted_mid_job_needs_no_resend_and_renders_no_chunk_twice(
    farm: Farm, api: TestClient, settings: Settings, redis_server: RedisServer, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=8, size="64x64", rate="15")  # 120 frames: 8 chunks
    _two_workers_and_the_reaper(farm, _slow_chunks(tmp_path / "bin"))
    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 16})
    wait_for(lambda: _done(settings, job_id) >= 2, timeout=180, what="two chunks done")

    redis_server.stop()
    assert any(c.status == "queued" for c in _chunks(settings, job_id)), "the job should still have queued work"
    # Away until the reaper has seen it (it tells every unfinished job), then back with what it held.
    wait_for(lambda: _events(settings, job_id, "broker_unreachable"), timeout=60, what="the outage noticed")
    redis_server.start()

    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    assert _events(settings, job_id, "resent") == [], "the broker kept every message: nothing to re-send"
    chunks = _chunks(settings, job_id)
    assert [c.attempts for c in chunks] == [1] * len(chunks), "a chunk was rendered twice"
    rendered = [line for key in ("w1", "w2") for line in farm.log(key).splitlines() if "rendering frames" in line]
    assert len(rendered) == len(chunks), rendered
    _assert_whole_and_counted_once(settings, api, job_id, clip, tmp_path / "out.mp4")
