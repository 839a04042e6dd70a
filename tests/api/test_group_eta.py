"""A group's ETA (``GET /v1/groups/{id}``, ``shared.progress.group_eta``): the frames its unfinished members have
left, those still waiting for a place included, over the rate its rendering members render at together; none
while a member waits for a person (paused, awaiting approval) or nothing renders yet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from shared import control, jobs, lifecycle
from shared.db import session_scope
from shared.media import MediaInfo
from shared.models import Chunk, JobGroup, Tenant, new_id
from shared.options import JobOptions
from shared.settings import Settings
from tests.support.tenants import bearer, make_key

# 30 frames by its header (no frame count: 1.2 s at 25 fps), 25 after the trim
HEADER = MediaInfo(64, 64, "25/1", 1.2, None, "h264", "yuv420p", 0, 0.0, False, None, "mp4").to_json()


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def _member(settings: Settings, tenant_id: str, group_id: str, **options: object) -> str:
    job_id = new_id()
    with session_scope(settings.database_url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"], **options),  # type: ignore[arg-type]
            target_url="file:///t.mp4", source_urls=[], target_name="t.mp4", media=HEADER, tenant_id=tenant_id,
            group_id=group_id,
        )  # fmt: skip
        lifecycle.admit(s, tenant_id, 1)
    return job_id


def _render_half(settings: Settings, job_id: str) -> None:
    """Plan the job into two chunks of 10 frames and render the first in 2 s: the farm's rate on it is 5 fps."""
    with session_scope(settings.database_url) as s:
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
    plans = [jobs.ChunkPlan(i, i * 10, i * 10 + 10, i / 3) for i in range(2)]
    with session_scope(settings.database_url) as s:
        jobs.record_plan(s, job_id, token, plans, HEADER, "any")
        first = s.scalar(select(Chunk.id).where(Chunk.job_id == job_id, Chunk.index == 0))
        assert first is not None
        claim = jobs.claim_chunk(s, first, worker="w", family="cpu", lease_seconds=60)
        assert claim is not None
    with session_scope(settings.database_url) as s:
        jobs.finish_chunk(s, claim, "file:///c/0.mp4", 2.0)


def test_a_groups_eta_counts_its_waiting_members_at_its_rendering_members_rate(
    client: TestClient, settings: Settings
) -> None:
    name = f"eta-{new_id()[:8]}"
    key = make_key(settings, name, max_running_jobs=1)
    group_id = new_id()
    with session_scope(settings.database_url) as s:
        tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == name))
        assert tenant_id is not None
        s.add(JobGroup(id=group_id, tenant_id=tenant_id, name="takes"))

    def eta() -> float | None:
        body = client.get(f"/v1/groups/{group_id}", headers=bearer(key)).json()
        return body["progress"]["eta_seconds"]  # type: ignore[no-any-return]

    rendering = _member(settings, tenant_id, group_id)
    assert eta() is None, "nothing renders yet: no rate"
    _render_half(settings, rendering)
    waiting = _member(settings, tenant_id, group_id, trim_start_frame=5)  # the tenant's one place is taken
    paused = _member(settings, tenant_id, group_id, start_paused=True)
    assert eta() is None, "a paused member waits for a person"
    with session_scope(settings.database_url) as s:
        control.cancel_job(s, paused, 1)
    # 10 frames left of the rendering member and 25 of the waiting one, at 5 fps
    with session_scope(settings.database_url) as s:
        member = jobs.get_job(s, waiting)
        assert member is not None and member.status == "waiting" and member.frames_total is None
    assert eta() == 7.0
