"""The console's controls beyond a job's cancel and retry, without a browser: the farm's pause and resume and a
worker's release on the workers page (admin keys only; a tenant's post is refused as ``/v1`` refuses it), a
rendering job paused now from its page (its running chunk queued again, the attempt not counted), and why a job
waits for a worker (its ``wait_reason``) on its page."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from api.app import create_app
from shared import jobs
from shared.db import session_scope
from shared.models import Chunk, Tenant, WorkerPresence, utcnow
from shared.models import Job as JobRow
from shared.settings import Settings
from tests.api.test_console import _sign_in
from tests.support.rows import planned_job
from tests.support.tenants import bearer, make_key


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        yield client


def test_the_workers_page_pauses_and_resumes_the_farm_for_an_admin_key_only(
    client: TestClient, settings: Settings
) -> None:
    tenant, admin = make_key(settings), make_key(settings, admin=True)

    def paused() -> bool:
        return bool(client.get("/v1/farm", headers=bearer(tenant)).json()["paused"])

    seen = client.get("/ui/workers", headers=bearer(tenant)).text
    assert 'id="farm-state"' in seen and "/ui/farm/pause" not in seen, "a tenant sees the state, no button"
    refused = client.post("/ui/farm/pause", headers=bearer(tenant))
    assert refused.status_code == 403 and not paused()

    csrf = _sign_in(client, admin)
    page = client.get("/ui/workers").text
    assert 'action="/ui/farm/pause"' in page
    assert client.post("/ui/farm/pause", data={"csrf_token": "forged"}).status_code == 403 and not paused()
    try:
        done = client.post("/ui/farm/pause", data={"csrf_token": csrf})
        assert done.status_code == 303 and done.headers["location"] == "/ui/workers" and paused()
        page = client.get("/ui/workers").text
        assert 'action="/ui/farm/resume"' in page and ">paused<" in page
    finally:
        client.post("/v1/farm/resume", headers=bearer(admin))
    assert client.post("/ui/farm/pause", data={"csrf_token": csrf}).status_code == 303
    assert client.post("/ui/farm/resume", data={"csrf_token": csrf}).status_code == 303 and not paused()
    assert client.post("/ui/farm/stop-everything", data={"csrf_token": csrf}).status_code == 404


def test_an_admin_releases_a_quarantined_worker_from_the_workers_page(client: TestClient, settings: Settings) -> None:
    name = f"cpu-{uuid.uuid4().hex[:8]}@host-q"
    with session_scope(settings.database_url) as s:
        s.add(WorkerPresence(
            name=name, hostname="host-q", family="cpu", last_seen_at=utcnow(), quarantined_at=utcnow(),
            quarantine_reason="failed chunks of 2 jobs within 3600s",
        ))  # fmt: skip
    tenant, admin = make_key(settings), make_key(settings, admin=True)
    action = f'action="/ui/workers/{name.replace("@", "%40")}/release"'
    try:
        assert action not in client.get("/ui/workers", headers=bearer(tenant)).text
        assert client.post(f"/ui/workers/{name}/release", headers=bearer(tenant)).status_code == 403
        page = client.get("/ui/workers", headers=bearer(admin)).text
        assert action in page and f'aria-label="Release {name}"' in page
        released = client.post(f"/ui/workers/{name}/release", headers=bearer(admin))
        assert released.status_code == 303 and released.headers["location"] == "/ui/workers"
        with session_scope(settings.database_url) as s:
            row = s.get(WorkerPresence, name)
            assert row is not None and row.quarantined_at is None
        assert action not in client.get("/ui/workers", headers=bearer(admin)).text
        again = client.post(f"/ui/workers/{name}/release", headers=bearer(admin))
        assert again.status_code == 409 and "not quarantined" in again.text
        assert client.post("/ui/workers/nobody@nowhere/release", headers=bearer(admin)).status_code == 404
    finally:
        with session_scope(settings.database_url) as s:
            s.execute(delete(WorkerPresence).where(WorkerPresence.name == name))


def test_a_rendering_job_is_paused_now_from_its_page_and_its_running_chunk_queued_again_uncounted(
    client: TestClient, settings: Settings
) -> None:
    key = make_key(settings, "pausing-now")
    job_id, chunk_ids = planned_job(settings.database_url, 2)
    with session_scope(settings.database_url) as s:
        tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == "pausing-now"))
        s.execute(update(JobRow).where(JobRow.id == job_id).values(tenant_id=tenant_id))
        assert jobs.claim_chunk(s, chunk_ids[0], worker="w", family="cpu", lease_seconds=60) is not None
    page = client.get(f"/ui/jobs/{job_id}", headers=bearer(key)).text
    assert f'action="/ui/jobs/{job_id}/pause"' in page and f'action="/ui/jobs/{job_id}/pause-now"' in page
    done = client.post(f"/ui/jobs/{job_id}/pause-now", headers=bearer(key))
    assert done.status_code == 303 and done.headers["location"] == f"/ui/jobs/{job_id}"
    with session_scope(settings.database_url) as s:
        job = s.get(JobRow, job_id)
        chunk = s.get(Chunk, chunk_ids[0])
        assert job is not None and job.status == "paused"
        assert chunk is not None and (chunk.status, chunk.attempts) == ("queued", 0)
    assert f'action="/ui/jobs/{job_id}/pause-now"' not in client.get(f"/ui/jobs/{job_id}", headers=bearer(key)).text


def test_a_job_no_live_worker_can_take_says_why_on_its_page(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    tag = f"nowhere-{uuid.uuid4().hex[:8]}"
    options = {"processors": ["passthrough"], "required_tags": [tag]}
    made = client.post(
        "/v1/jobs", files={"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options": json.dumps(options)}, headers=bearer(key),
    )  # fmt: skip
    assert made.status_code == 202, made.text
    page = client.get(f"/ui/jobs/{made.json()['id']}", headers=bearer(key)).text
    assert 'id="wait-reason"' in page and "no_worker_with_tags" in page
    assert "no live worker has every tag this job requires" in page and tag in page
