"""Prometheus endpoints: the API's farm-wide series (jobs by state, queue depth that follows the real queue) and a
worker's own rendering series; the worker's JSON log lines carry the job and chunk ids."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import update

from shared import jobs
from shared.db import session_scope
from shared.dispatch import Dispatcher
from shared.models import Chunk, new_id, utcnow
from shared.options import JobOptions
from shared.settings import Settings
from shared.states import JobStatus
from shared.tasks import CONTROL_QUEUE, MAX_PRIORITY, RENDER_CHUNK, ChunkPayload, render_queue
from tests.integration.conftest import submit, wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.services import free_port
from workers.engines.family import detect_family

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
PASSTHROUGH = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}}


def _parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _api_samples(api: TestClient) -> Samples:
    response = api.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return _parse(response.text)


def test_api_metrics_show_jobs_by_state_and_the_queue_depth_follows_the_queue(
    api: TestClient, farm: Farm, settings: Settings, clip_short: Path
) -> None:
    family = detect_family(settings)
    before = _api_samples(api)  # the test database holds the jobs of earlier tests: counts are compared to these
    assert _value(before, "swapfarm_metrics_source_up", source="database") == 1
    assert _value(before, "swapfarm_metrics_source_up", source="broker") == 1
    for state in JobStatus:
        assert ("swapfarm_jobs", frozenset({("state", state.value)})) in before, f"every state is listed: {state}"
    assert _value(before, "swapfarm_queue_depth", queue=render_queue(family)) == 0

    def delta(samples: Samples, name: str, **labels: str) -> float:
        return _value(samples, name, **labels) - _value(before, name, **labels)

    # Enqueue N through the real sender, at every priority level (one Redis list per level): N are waiting.
    dispatcher: Dispatcher = api.app.state.dispatcher
    for i in range(MAX_PRIORITY + 2):
        payload = ChunkPayload(job_id="no-such-job", chunk_id=f"no-such-chunk-{i}")
        dispatcher.send(RENDER_CHUNK, payload, queue=render_queue(family), priority=i % (MAX_PRIORITY + 1))
    jobs = [submit(api, clip_short, {**PASSTHROUGH, "chunk_frames": 60}) for _ in range(2)]
    queued = _api_samples(api)
    assert _value(queued, "swapfarm_queue_depth", queue=render_queue(family)) == MAX_PRIORITY + 2
    assert _value(queued, "swapfarm_queue_depth", queue=CONTROL_QUEUE) == 2
    assert delta(queued, "swapfarm_jobs", state="queued") == 2

    # A worker drains the queues: the depth follows it down, the jobs move to succeeded. (The jobs' own chunks
    # outrank the low-priority messages above, so the jobs may end before the queue is empty.)
    farm.worker("w1")
    for job_id in jobs:
        assert wait_finished(api, job_id, farm)["status"] == "succeeded"

    def drained_queues() -> Samples | None:
        samples = _api_samples(api)
        depths = {q: _value(samples, "swapfarm_queue_depth", queue=q) for q in (render_queue(family), CONTROL_QUEUE)}
        return samples if not any(depths.values()) else None

    drained = wait_for(drained_queues, timeout=60, what="the queues to drain")
    assert isinstance(drained, dict)
    assert delta(drained, "swapfarm_jobs", state="succeeded") == 2
    assert delta(drained, "swapfarm_jobs", state="queued") == 0
    assert delta(drained, "swapfarm_chunks", state="done") == 4


def test_a_worker_serves_its_rendering_series_and_logs_json_with_job_and_chunk_ids(
    api: TestClient, farm: Farm, settings: Settings, clip_short: Path
) -> None:
    family = detect_family(settings)
    port = free_port()
    hostname = farm.worker(
        "w1", env={"SWAPFARM_WORKER_METRICS_PORT": str(port), "SWAPFARM_WORKER_METRICS_ADDRESS": "127.0.0.1"}
    )
    job_id = submit(api, clip_short, {**PASSTHROUGH, "chunk_frames": 30})
    assert wait_finished(api, job_id, farm)["status"] == "succeeded"

    samples = _parse(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
    chunks = 4  # 120 frames in chunks of 30
    assert _value(samples, "swapfarm_chunk_render_seconds_count", family=family) == chunks
    assert _value(samples, "swapfarm_chunk_render_seconds_sum", family=family) > 0
    assert _value(samples, "swapfarm_frames_rendered_total", family=family) == 120
    assert _value(samples, "swapfarm_worker_frames_per_second", worker=hostname, family=family) > 0
    assert _value(samples, "swapfarm_render_batch_size_count") >= chunks
    assert _value(samples, "swapfarm_render_batch_size_sum") == 120
    assert _value(samples, "swapfarm_stitch_seconds_count") == 1
    assert _value(samples, "swapfarm_device_memory_bytes", device="cpu") > 0
    assert _value(samples, "swapfarm_retries_total", step="render") == 0
    assert _value(samples, "swapfarm_retries_total", step="task") == 0

    records = [json.loads(line) for line in farm.log("w1").splitlines() if line.startswith("{")]
    rendering = [r for r in records if "rendering frames" in r["message"] and r.get("job_id") == job_id]
    assert len({r["chunk_id"] for r in rendering}) == chunks, "every chunk's records carry its chunk id"
    stitched = [r for r in records if r["message"].startswith(f"job {job_id}: succeeded")]
    assert stitched and stitched[0]["job_id"] == job_id and "chunk_id" not in stitched[0]


def test_api_metrics_count_work_the_broker_lost_and_leases_overdue(api: TestClient, settings: Settings) -> None:
    """The two series a recovery alert watches: queued work the broker holds no message for, and running chunks whose
    worker stopped heartbeating. (No reaper runs here: nothing repairs either.)"""
    before = _api_samples(api)
    job_id = new_id()
    with session_scope(settings.database_url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"]), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4",
        )  # fmt: skip
    with session_scope(settings.database_url) as s:
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
    with session_scope(settings.database_url) as s:
        plans = [jobs.ChunkPlan(i, i * 10, i * 10 + 10, i / 3) for i in range(3)]
        first, second, _ = jobs.record_plan(s, job_id, token, plans, {}, "cpu")
    with session_scope(settings.database_url) as s:
        s.execute(update(Chunk).where(Chunk.job_id == job_id).values(enqueued_at=utcnow() - timedelta(minutes=1)))
        assert jobs.claim_chunk(s, first, worker="gone@test", family="cpu", lease_seconds=60) is not None
        s.execute(update(Chunk).where(Chunk.id == first).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    dispatcher: Dispatcher = api.app.state.dispatcher
    dispatcher.send(RENDER_CHUNK, ChunkPayload(job_id=job_id, chunk_id=second), queue=render_queue("cpu"))

    after = _api_samples(api)

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("swapfarm_missing_from_broker", step="render") == 1, "the third chunk: no message, nobody on it"
    assert delta("swapfarm_missing_from_broker", step="plan") == 0
    assert delta("swapfarm_chunks_lease_overdue") == 1, "the first chunk: its worker stopped heartbeating"
