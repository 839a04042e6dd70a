"""The reaper's view of the broker on the real Postgres and Redis: what the broker holds (queued at every priority,
taken by a worker, due later), which queued work it lost, and re-sending exactly that, once, with an event."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from kombu import Consumer
from sqlalchemy import select, update

from shared import jobs, reaper
from shared.broker import broker_contents, make_celery
from shared.db import session_scope
from shared.dispatch import CeleryDispatcher
from shared.errors import ProcessorError
from shared.models import Chunk, Job, JobEvent, utcnow
from shared.progress import progress_of
from shared.settings import Settings
from shared.states import JobStatus
from shared.tasks import CONTROL_QUEUE, PLAN, RENDER_CHUNK, STITCH, ChunkPayload, JobPayload, render_queue
from tests.support.rows import new_job, planned_job

LONG_AGO = timedelta(seconds=60)


@pytest.fixture
def celery(settings: Settings) -> Iterator[Celery]:
    app = make_celery(settings)
    yield app
    app.close()


def _job(url: str, chunks: int = 0) -> tuple[str, list[str]]:
    """A job queued long ago; with ``chunks``, planned into that many chunks queued long ago."""
    job_id, ids = planned_job(url, chunks, family="cpu") if chunks else (new_job(url), [])
    with session_scope(url) as s:
        s.execute(update(Job).where(Job.id == job_id).values(enqueued_at=utcnow() - LONG_AGO))
        s.execute(update(Chunk).where(Chunk.job_id == job_id).values(enqueued_at=utcnow() - LONG_AGO))
    return job_id, ids


def _send_render(app: Celery, job_id: str, chunk_id: str, **options: Any) -> None:
    CeleryDispatcher(app).send(
        RENDER_CHUNK, ChunkPayload(job_id=job_id, chunk_id=chunk_id), queue=render_queue("cpu"), **options
    )


def _take_one(app: Celery, queue: str) -> Any:
    """Take one message from ``queue`` as a worker does, without acknowledging it (it stays in ``unacked``)."""
    conn = app.connection_for_read()
    channel = conn.channel()
    taken: list[Any] = []
    consumer = Consumer(channel, [app.amqp.queues[queue]], callbacks=[lambda _, m: taken.append(m)], accept=["json"])
    consumer.qos(prefetch_count=1)
    consumer.consume()
    conn.drain_events(timeout=5)
    assert taken
    return conn  # kept open: closing the channel would give the message back


def _missing(url: str, app: Celery, job_id: str, taken_within: float = 60) -> set[tuple[str, str]]:
    contents = broker_contents(app)
    assert contents is not None
    with session_scope(url) as s:
        return {w.key for w in reaper.missing(s, contents, taken_within=taken_within) if w.job_id == job_id}


def test_the_broker_holds_work_queued_at_every_priority_and_taken_by_a_worker(
    settings: Settings, celery: Celery
) -> None:
    for priority in range(10):
        _send_render(celery, "j", f"c{priority}", priority=priority)
    CeleryDispatcher(celery).send(PLAN, JobPayload(job_id="p"), queue=CONTROL_QUEUE)
    CeleryDispatcher(celery).send(STITCH, JobPayload(job_id="s"), queue="stitch", countdown=30)
    conn = _take_one(celery, "stitch")  # a countdown message is taken at once and held until it is due
    try:
        contents = broker_contents(celery)
    finally:
        conn.close()
    assert contents is not None
    assert contents.waiting == {(RENDER_CHUNK, f"c{i}") for i in range(10)} | {(PLAN, "p")}
    assert set(contents.taken) == {(STITCH, "s")}
    assert contents.taken[(STITCH, "s")] > time.time() + 20, "held until its countdown ends"


def test_a_broker_whose_queues_cannot_be_read_is_reported_as_such() -> None:
    assert broker_contents(make_celery(Settings(broker_url="memory://"))) is None


def test_exactly_the_chunks_the_broker_lost_are_resent_once_with_one_event(settings: Settings, celery: Celery) -> None:
    url = settings.database_url
    job_id, (queued, taken, lost, also_lost) = _job(url, 4)
    _send_render(celery, job_id, queued)
    _send_render(celery, job_id, taken)
    conn = _take_one(celery, render_queue("cpu"))  # FIFO: the first one sent is taken
    try:
        assert _missing(url, celery, job_id) == {(RENDER_CHUNK, lost), (RENDER_CHUNK, also_lost)}
        contents = broker_contents(celery)
        assert contents is not None
        with session_scope(url) as s:
            work = [w for w in reaper.missing(s, contents, taken_within=60) if w.job_id == job_id]
            result = reaper.resend(s, work)
        assert sorted(result.render) == sorted([(job_id, lost), (job_id, also_lost)])
        with session_scope(url) as s:  # sent now: within the grace, so not missing again straight away
            again = reaper.missing(s, contents, taken_within=60)
            assert not [w for w in again if w.job_id == job_id]
            events = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == "resent")).all()
        assert [e.message for e in events] == ["2 chunks re-sent: the broker no longer held their messages"]
    finally:
        conn.close()


def test_a_message_a_worker_took_and_never_claimed_counts_as_lost(settings: Settings, celery: Celery) -> None:
    url = settings.database_url
    job_id, (chunk_id,) = _job(url, 1)
    _send_render(celery, job_id, chunk_id)
    conn = _take_one(celery, render_queue("cpu"))
    try:
        assert _missing(url, celery, job_id, taken_within=60) == set()
        time.sleep(0.3)
        # A worker claims its chunk as soon as it takes the message: one that held it longer died or hangs, and
        # the broker would only give the message back after the visibility timeout.
        assert _missing(url, celery, job_id, taken_within=0.2) == {(RENDER_CHUNK, chunk_id)}
    finally:
        conn.close()


def test_work_just_queued_is_given_time_to_be_sent(settings: Settings, celery: Celery) -> None:
    url = settings.database_url
    job_id, (chunk_id,) = _job(url, 1)
    with session_scope(url) as s:
        s.execute(update(Chunk).where(Chunk.id == chunk_id).values(enqueued_at=utcnow()))
    assert _missing(url, celery, job_id) == set()


def test_a_lost_plan_and_a_lost_stitch_are_found_like_lost_chunks(settings: Settings, celery: Celery) -> None:
    url = settings.database_url
    planned, _ = _job(url)
    assert _missing(url, celery, planned) == {(PLAN, planned)}
    CeleryDispatcher(celery).send(PLAN, JobPayload(job_id=planned), queue=CONTROL_QUEUE)
    assert _missing(url, celery, planned) == set()

    stitching, _ = _job(url)
    with session_scope(url) as s:
        s.execute(update(Job).where(Job.id == stitching).values(status=JobStatus.STITCHING))
    assert _missing(url, celery, stitching) == {(STITCH, stitching)}
    with session_scope(url) as s:  # a stitcher holds it: its lease, not a message, says it is being done
        s.execute(update(Job).where(Job.id == stitching).values(lease_expires_at=utcnow() + LONG_AGO))
    assert _missing(url, celery, stitching) == set()


def test_the_broker_found_unreachable_is_told_to_every_job_that_has_not_ended(settings: Settings) -> None:
    url = settings.database_url
    active, _ = _job(url, 2)
    ended, _ = _job(url)
    with session_scope(url) as s:
        jobs.fail_job(s, ended, ProcessorError("x"), default_limit=4)
        assert active in reaper.note_broker_unreachable(s, "ConnectionError: refused")
    with session_scope(url) as s:
        rows = s.scalars(select(JobEvent).where(JobEvent.job_id.in_([active, ended])).order_by(JobEvent.id)).all()
        kinds = {job_id: [e.kind for e in rows if e.job_id == job_id] for job_id in (active, ended)}
        job = s.get_one(Job, active)
        assert kinds[active][-1] == "broker_unreachable" and "broker_unreachable" not in kinds[ended]
        assert progress_of(s, job).recovering
