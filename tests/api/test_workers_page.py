"""The workers page shows a tenant its own chunks only, and host names and devices to admin keys only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select, update

from api.app import create_app
from shared.db import session_scope
from shared.models import Chunk, Job, Tenant, WorkerPresence, utcnow
from shared.settings import Settings
from shared.states import ChunkStatus
from tests.support.rows import planned_job
from tests.support.tenants import bearer, make_key

WORKERS = {  # name: (host, device); Celery's node names carry the host
    "cpu-101@render-host-alpha": ("render-host-alpha", "Intel Xeon Platinum 8480"),
    "cuda-202@gpu-box-bravo": ("gpu-box-bravo", "NVIDIA H200 (cuda:0)"),
}


def _running_chunk(settings: Settings, tenant: str, worker: str) -> str:
    """A job of ``tenant`` whose chunk 0 ``worker`` renders now (7 of its 10 frames done)."""
    job_id, chunk_ids = planned_job(settings.database_url, 1)
    with session_scope(settings.database_url) as s:
        tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == tenant))
        s.execute(update(Job).where(Job.id == job_id).values(tenant_id=tenant_id))
        s.execute(
            update(Chunk)
            .where(Chunk.id == chunk_ids[0])
            .values(status=ChunkStatus.RUNNING, worker=worker, frames_done=7, started_at=utcnow())
        )
    return job_id


@pytest.fixture
def farm(settings: Settings) -> Iterator[tuple[TestClient, dict[str, str], dict[str, str]]]:
    """Two tenants, each with a chunk running on one of two workers; keys of both and of an admin."""
    with session_scope(settings.database_url) as s:
        for name, (host, device) in WORKERS.items():
            s.merge(WorkerPresence(name=name, hostname=host, family=name.split("-")[0], device=device,
                                   last_seen_at=utcnow()))  # fmt: skip
    keys = {"alice": make_key(settings, "alice-w"), "bob": make_key(settings, "bob-w")}
    keys["admin"] = make_key(settings, "ops-w", admin=True)
    alice_cpu, bob_gpu = list(WORKERS)
    jobs = {"alice": _running_chunk(settings, "alice-w", alice_cpu), "bob": _running_chunk(settings, "bob-w", bob_gpu)}
    with TestClient(create_app(settings)) as client:
        yield client, keys, jobs
    with session_scope(settings.database_url) as s:
        s.execute(delete(WorkerPresence).where(WorkerPresence.name.in_(list(WORKERS))))


@pytest.mark.parametrize("path", ["/ui/workers", "/ui/workers/rows"])
def test_a_tenant_sees_its_own_chunk_and_no_host_or_device(
    farm: tuple[TestClient, dict[str, str], dict[str, str]], path: str
) -> None:
    client, keys, jobs = farm
    page = client.get(path, headers=bearer(keys["alice"]))
    assert page.status_code == 200
    html = page.text
    for name, (host, device) in WORKERS.items():
        assert name not in html and host not in html and device not in html
    assert f"/ui/jobs/{jobs['alice']}" in html and "7 of 10 frames" in html
    assert jobs["bob"] not in html and html.count("of 10 frames") == 1, "nothing of bob's chunk but that it runs"
    assert "busy with another tenant" in html


def test_an_admin_sees_every_worker_whole(farm: tuple[TestClient, dict[str, str], dict[str, str]]) -> None:
    client, keys, jobs = farm
    html = client.get("/ui/workers", headers=bearer(keys["admin"])).text
    for name, (host, device) in WORKERS.items():
        assert name in html and host in html and device in html
    assert jobs["alice"] in html and jobs["bob"] in html and html.count("7 of 10 frames") == 2
