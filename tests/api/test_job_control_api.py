"""Job control through the API on the real Postgres and Redis, without workers: listing, idempotency, limits,
cancel and retry, the event log and its stream, and downloads with ranges and expiry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from api.app import create_app
from shared import jobs
from shared.db import session_scope
from shared.models import Job, utcnow
from shared.settings import Settings
from shared.storage import Storage
from tests.shared.test_control import Recorder
from tests.support.tenants import bearer
from workers.reaping import reap
from workers.runtime import Runtime

PASSTHROUGH = {"processors": ["passthrough"]}


@pytest.fixture
def client(settings: Settings, api_key: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=bearer(api_key)) as client:
        yield client


def _post(
    client: TestClient,
    clip: Path,
    options: dict[str, object] | None = None,
    *,
    key: str | None = None,
    sources: list[tuple[str, bytes]] | None = None,
) -> httpx.Response:
    files = [("target", ("clip.mp4", clip.read_bytes(), "video/mp4"))]
    files += [("source", (name, content, "image/jpeg")) for name, content in sources or []]
    headers = {"Idempotency-Key": key} if key else {}
    form = {"options": json.dumps(options or PASSTHROUGH)}
    return client.post("/v1/jobs", files=files, data=form, headers=headers)


def _submit(client: TestClient, clip: Path, key: str | None = None) -> str:
    response = _post(client, clip, key=key)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _stored(settings: Settings, job_id: str) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://")) / "jobs" / job_id
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def _set(settings: Settings, job_id: str, **values: object) -> None:
    with session_scope(settings.database_url) as s:
        s.execute(update(Job).where(Job.id == job_id).values(**values))


def test_jobs_are_listed_newest_first_a_page_at_a_time_with_filters(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    ids = [_submit(client, clip_short) for _ in range(5)]
    start = datetime(2030, 1, 1, tzinfo=UTC)
    for i, job_id in enumerate(ids):  # distinct, known creation times; two of them cancelled
        _set(settings, job_id, created_at=start + timedelta(minutes=i))
    for job_id in ids[1:3]:
        assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200

    seen, cursor = [], None
    while True:
        page = client.get("/v1/jobs", params={"limit": 2} | ({"cursor": cursor} if cursor else {})).json()
        assert len(page["jobs"]) <= 2
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    cancelled = client.get("/v1/jobs", params={"status": "cancelled"}).json()["jobs"]
    assert [j["id"] for j in cancelled] == [ids[2], ids[1]]
    both = client.get("/v1/jobs", params=[("status", "cancelled"), ("status", "queued")]).json()["jobs"]
    assert len(both) == 5
    window = {"created_after": "2030-01-01T00:01:00Z", "created_before": "2030-01-01T01:03:00+01:00"}
    assert [j["id"] for j in client.get("/v1/jobs", params=window).json()["jobs"]] == [ids[2], ids[1]]
    for bad in ({"cursor": "not-a-cursor"}, {"created_after": "1700000000"}, {"created_after": "2030-01-01"}):
        answer = client.get("/v1/jobs", params=bad)
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "request_invalid", bad


def test_the_same_idempotency_key_and_request_answer_the_same_job_and_another_request_conflicts(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    first = _submit(client, clip_short, key="order-42")
    again = _submit(client, clip_short, key="order-42")
    assert again == first
    other = _post(client, clip_short, {"processors": ["passthrough"], "chunk_frames": 10}, key="order-42")
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_conflict"
    with session_scope(settings.database_url) as s:
        assert s.scalar(select(func.count()).select_from(Job).where(Job.idempotency_key == "order-42")) == 1


@pytest.mark.parametrize(
    ("limits", "code", "status"),
    [
        ({"max_upload_bytes": 1000}, "upload_too_large", 413),
        ({"max_duration_seconds": 1.0}, "media_too_long", 422),
        ({"max_frame_pixels": 320 * 180 - 1}, "resolution_too_large", 422),
        ({"max_frames": 30}, "too_many_frames", 422),
        ({"max_source_bytes": 10}, "source_too_large", 413),
        ({"max_sources": 1}, "too_many_sources", 422),
    ],
)
def test_each_limit_is_refused_with_its_code_and_nothing_is_stored(
    settings: Settings, api_key: str, clip_short: Path, limits: dict[str, float], code: str, status: int
) -> None:
    limited = settings.model_copy(update=limits)
    with TestClient(create_app(limited), headers=bearer(api_key)) as client:
        response = _post(client, clip_short, sources=[("a.jpg", b"x" * 100), ("b.jpg", b"y" * 100)])
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    root = Path(settings.storage_url.removeprefix("file://"))
    assert not root.exists() or not any(p.is_file() for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("request_kwargs", "code", "status"),
    [
        ({"json": {"target": "x"}}, "request_invalid", 422),
        ({"files": {"options": (None, "{}")}}, "request_invalid", 422),
        ({"files": {"target": ("a.mp4", b"x"), "colour": (None, "red")}}, "request_invalid", 422),
        ({"files": {"target": ("a.mp4", b"x"), "priority": (None, "11")}}, "request_invalid", 422),
        ({"files": {"target": ("a.mp4", b"x" * (2 << 20))}}, "request_too_large", 413),
    ],
)
def test_a_malformed_submission_is_refused_with_a_stable_code(
    settings: Settings, api_key: str, request_kwargs: dict[str, object], code: str, status: int
) -> None:
    small = settings.model_copy(update={"max_upload_bytes": 1000, "max_sources": 0, "max_audio_bytes": 1000})
    with TestClient(create_app(small), headers=bearer(api_key)) as client:
        response = client.post("/v1/jobs", **request_kwargs)  # type: ignore[arg-type]
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_cancel_ends_the_job_deletes_its_files_and_is_idempotent(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    job_id = _submit(client, clip_short)
    assert _stored(settings, job_id)
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert _stored(settings, job_id) == []
    assert client.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"
    retry = client.post(f"/v1/jobs/{job_id}/retry")
    assert retry.status_code == 409 and retry.json()["error"]["code"] == "job_not_retryable"
    kinds = [e["kind"] for e in client.get(f"/v1/jobs/{job_id}/events").json()["events"]]
    assert kinds == ["submitted", "admitted", "cancelled"]


def test_a_finished_job_cannot_be_cancelled(client: TestClient, settings: Settings, clip_short: Path) -> None:
    job_id = _submit(client, clip_short)
    _set(settings, job_id, status="failed", error_code="processor_failed", finished_at=utcnow())
    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 409 and response.json()["error"]["code"] == "job_not_cancellable"


def test_the_event_stream_sends_the_log_then_the_final_state(client: TestClient, clip_short: Path) -> None:
    job_id = _submit(client, clip_short)
    client.post(f"/v1/jobs/{job_id}/cancel")
    with client.stream("GET", f"/v1/jobs/{job_id}/events/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    blocks = [b for b in text.split("\n\n") if b.strip()]
    kinds = [json.loads(b.split("data: ", 1)[1])["kind"] for b in blocks if "event: event" in b]
    assert kinds == ["submitted", "admitted", "cancelled"]
    assert blocks[-1].startswith("event: end") and json.loads(blocks[-1].split("data: ", 1)[1])["status"] == "cancelled"
    # resuming after the second event sends only what came later
    with client.stream("GET", f"/v1/jobs/{job_id}/events/stream", headers={"Last-Event-ID": "0"}) as response:
        first_id = next(int(line[4:]) for line in response.iter_lines() if line.startswith("id: "))
    with client.stream(
        "GET", f"/v1/jobs/{job_id}/events/stream", headers={"Last-Event-ID": str(first_id + 1)}
    ) as response:
        resumed = [line for line in response.iter_lines() if line.startswith("id: ")]
    assert resumed == [f"id: {first_id + 2}"]


@pytest.fixture
def finished(client: TestClient, settings: Settings, clip_short: Path, tmp_path: Path) -> tuple[str, bytes]:
    """A job made to look succeeded, with a 3000-byte output in storage (the download route is what is tested)."""
    job_id = _submit(client, clip_short)
    storage = Storage(settings.storage_url)
    content = bytes(range(256)) * 11 + bytes(184)
    local = tmp_path / "output.mp4"
    local.write_bytes(content)
    url = storage.job_url(job_id, "output.mp4")
    storage.upload(local, url)
    _set(settings, job_id, status="succeeded", output_url=url, finished_at=utcnow())
    return job_id, content


@pytest.mark.parametrize(
    ("header", "status", "span"),
    [
        (None, 200, (0, 2999)),
        ("bytes=0-99", 206, (0, 99)),
        ("bytes=2990-", 206, (2990, 2999)),
        ("bytes=-10", 206, (2990, 2999)),
        ("bytes=100-99999", 206, (100, 2999)),
        ("bytes=0-1,5-6", 200, (0, 2999)),  # several ranges: the whole file, as RFC 9110 allows
        ("items=0-1", 200, (0, 2999)),
    ],
)
def test_the_output_is_served_whole_or_by_range(
    client: TestClient, finished: tuple[str, bytes], header: str | None, status: int, span: tuple[int, int]
) -> None:
    job_id, content = finished
    response = client.get(f"/v1/jobs/{job_id}/output", headers={"Range": header} if header else {})
    assert response.status_code == status
    assert response.content == content[span[0] : span[1] + 1]
    assert response.headers["accept-ranges"] == "bytes"
    assert int(response.headers["content-length"]) == span[1] - span[0] + 1
    if status == 206:
        assert response.headers["content-range"] == f"bytes {span[0]}-{span[1]}/3000"


def test_a_range_past_the_end_is_416(client: TestClient, finished: tuple[str, bytes]) -> None:
    job_id, _ = finished
    response = client.get(f"/v1/jobs/{job_id}/output", headers={"Range": "bytes=3000-"})
    assert response.status_code == 416
    assert response.headers["content-range"] == "bytes */3000"
    assert response.json()["error"]["code"] == "range_not_satisfiable"


def test_the_reaper_deletes_outputs_past_the_retention_time(
    client: TestClient, settings: Settings, finished: tuple[str, bytes]
) -> None:
    job_id, _ = finished
    assert client.get(f"/v1/jobs/{job_id}").json()["output_expires_at"] is not None
    _set(settings, job_id, finished_at=utcnow() - timedelta(seconds=settings.output_ttl_seconds + 60))

    rt = Runtime(
        settings=settings, storage=Storage(settings.storage_url), dispatcher=Recorder(), hostname="r", family="cpu"
    )
    reap(rt)
    assert _stored(settings, job_id) == []
    response = client.get(f"/v1/jobs/{job_id}/output")
    assert response.status_code == 410 and response.json()["error"]["code"] == "output_expired"
    body = client.get(f"/v1/jobs/{job_id}").json()
    assert body["expired"] is True and body["output_expires_at"] is None


def test_a_stitching_job_is_not_paused_through_the_api_and_its_stitch_finishes(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    job_id = _submit(client, clip_short)
    url = settings.database_url
    with session_scope(url) as s:  # what the planner, a worker and the stitcher do, up to the stitch
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
        (chunk_id,) = jobs.record_plan(s, job_id, token, [jobs.ChunkPlan(0, 0, 10, 0.0)], {}, "any")
        claim = jobs.claim_chunk(s, chunk_id, worker="w", family="cpu", lease_seconds=60)
        assert claim is not None
    with session_scope(url) as s:
        assert jobs.finish_chunk(s, claim, "file:///c/0.mp4", 0.1), "the last chunk: the stitch is next"
    with session_scope(url) as s:
        stitcher = jobs.begin_stitch(s, job_id, 60, worker="w")
        assert stitcher is not None
    for params in ({}, {"now": "true"}):
        refused = client.post(f"/v1/jobs/{job_id}/pause", params=params)
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "job_not_pausable"), refused.text
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "stitching"
    with session_scope(url) as s:
        assert jobs.finish_job(s, job_id, stitcher, "file:///out.mp4", default_limit=4).changed, "it finishes"
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    ended = client.post(f"/v1/jobs/{job_id}/pause")
    assert (ended.status_code, ended.json()["error"]["code"]) == (409, "job_not_pausable")
