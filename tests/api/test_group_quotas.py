"""The tenant's quotas apply to each member of a group as to any job (``shared.groups.submit_group``): a member
that would put the tenant over its waiting-jobs quota refuses the whole group (the members made before it
cancelled, their files deleted), or with ``partial`` is listed as refused while the others go ahead."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from shared.db import session_scope
from shared.models import Job, Tenant
from shared.settings import Settings
from tests.support.tenants import bearer, make_key

PASSTHROUGH = json.dumps({"processors": ["passthrough"]})


@pytest.fixture
def quota_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"max_waiting_jobs_per_tenant": 1})


@pytest.fixture
def client(quota_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(quota_settings)) as client:
        yield client


def _group(client: TestClient, key: str, clip: Path, **data: str) -> dict[str, object]:
    files = [("target", (f"take-{i}.mp4", clip.read_bytes(), "video/mp4")) for i in range(3)]
    response = client.post("/v1/groups", files=files, data={"options": PASSTHROUGH, **data}, headers=bearer(key))
    body: dict[str, object] = response.json()
    return {"http": response.status_code, **body}


def _jobs(settings: Settings, tenant: str) -> list[tuple[str, str]]:
    with session_scope(settings.database_url) as s:
        rows = s.execute(
            select(Job.id, Job.status).join(Tenant, Tenant.id == Job.tenant_id).where(Tenant.name == tenant)
        )
        return [(str(job_id), str(status)) for job_id, status in rows]


def _files(settings: Settings, job_id: str) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://")) / "jobs" / job_id
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_a_member_over_the_waiting_quota_refuses_the_group_or_alone_with_partial(
    client: TestClient, quota_settings: Settings, clip_short: Path
) -> None:
    # one job runs at once, one more may wait: the third member is one too many
    key = make_key(quota_settings, "quota-whole", max_running_jobs=1)
    refused = _group(client, key, clip_short)
    assert refused["http"] == 422, refused
    error = refused["error"]
    assert isinstance(error, dict) and error["code"] == "group_member_refused"
    assert "member 3" in error["message"] and "too_many_waiting_jobs" in error["message"]
    made = _jobs(quota_settings, "quota-whole")
    assert [status for _, status in made] == ["cancelled", "cancelled"], "the members made first are undone"
    assert not any(_files(quota_settings, job_id) for job_id, _ in made), "and their files deleted"

    key = make_key(quota_settings, "quota-partial", max_running_jobs=1)
    partial = _group(client, key, clip_short, partial="true")
    assert partial["http"] == 202, partial
    assert partial["jobs"] == {"queued": 1, "waiting": 1}
    assert [(r["index"], r["code"]) for r in partial["refused"]] == [(2, "too_many_waiting_jobs")]  # type: ignore[attr-defined]
