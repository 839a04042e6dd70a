"""A job group's one event stream, and groups submitted as JSON (targets by URL), through real Celery workers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared.db import session_scope
from shared.models import Job, JobGroup
from shared.settings import Settings
from tests.support.farm import Farm
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}}


@pytest.fixture
def media(tmp_path: Path) -> Path:
    """Where the JSON bodies' URLs point: two tiny clips (64x64, 8 and 10 frames)."""
    folder = tmp_path / "media"
    folder.mkdir()
    for i in range(2):
        make_clip(folder / f"take-{i}.mp4", seconds=(8 + 2 * i) / 16, size="64x64", rate="16", audio=False)
    return folder


@pytest.fixture
def group_settings(settings: Settings, media: Path) -> Settings:
    return settings.model_copy(
        update={"max_group_members": 4, "events_poll_seconds": 0.2, "input_url_prefixes": [f"file://{media}/"]}
    )


@pytest.fixture
def farm(group_settings: Settings, tmp_path: Path) -> Iterator[Farm]:
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(group_settings, logs)
    yield farm
    farm.stop()


@pytest.fixture
def api(group_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(group_settings), headers=bearer(make_key(group_settings))) as client:
        yield client


def _stream(api: TestClient, group_id: str, **headers: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """The group's stream read to its end: (event type, data, id) per block."""
    blocks = []
    with api.stream("GET", f"/v1/groups/{group_id}/events/stream?max_seconds=300", headers=headers) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    for block in (b for b in text.split("\n\n") if "data: " in b):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        blocks.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
    return blocks


def _rows(settings: Settings) -> tuple[int, int]:
    with session_scope(settings.database_url) as s:
        jobs = s.scalar(select(func.count()).select_from(Job)) or 0
        return jobs, s.scalar(select(func.count()).select_from(JobGroup)) or 0


def test_a_groups_stream_carries_every_members_events_and_ends_with_its_last_member(
    farm: Farm, api: TestClient, media: Path
) -> None:
    farm.worker("w1")
    files = [("target", (p.name, p.read_bytes(), "video/mp4")) for p in sorted(media.iterdir())]
    response = api.post("/v1/groups", files=files, data={"options": json.dumps(PASSTHROUGH)})
    assert response.status_code == 202, response.text
    group = response.json()

    blocks = _stream(api, group["id"])
    events = [data for kind, data, _ in blocks if kind == "event"]
    for job_id in group["job_ids"]:  # each member's life, in order, in the one stream
        kinds = [e["kind"] for e in events if e["job_id"] == job_id]
        assert kinds[0] == "submitted" and kinds[-1] == "succeeded" and "chunk_done" in kinds, kinds
    assert [e["job_id"] for e in events if e["kind"] == "group_finished"] == [group["id"]]
    ids = [int(i) for _, _, i in blocks if i is not None]
    assert ids == sorted(set(ids))  # each event once, in order
    views = [data for kind, data, _ in blocks if kind == "group"]
    assert views[0]["status"] == "active" and views[-1]["status"] == "succeeded"
    last_kind, last, _ = blocks[-1]
    assert last_kind == "end" and last["status"] == "succeeded" and last["jobs"] == {"succeeded": 2}

    # a client that reconnects after an event gets only the later ones
    resumed = _stream(api, group["id"], **{"Last-Event-ID": str(ids[-2])})
    assert [int(i) for _, _, i in resumed if i is not None] == [ids[-1]]
    # another tenant's group has no stream
    other = api.get(f"/v1/groups/{group['id']}/events/stream", headers=bearer(make_key(farm.settings)))
    assert other.status_code == 404


def test_a_json_group_names_its_targets_by_url_and_a_refused_one_refuses_it_or_is_listed(
    farm: Farm, api: TestClient, group_settings: Settings, media: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.mp4"
    shutil.copy(media / "take-0.mp4", outside)
    body: dict[str, Any] = {
        "targets": [{"url": f"file://{media}/take-1.mp4", "name": "good.mp4"}, {"url": f"file://{outside}"}],
        "options": PASSTHROUGH,
        "name": "by url",
    }
    before = _rows(group_settings)
    response = api.post("/v1/groups", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "group_member_refused" and "member 2 ('outside.mp4')" in error["message"], error
    assert _rows(group_settings) == before  # no job, no group
    storage = Path(group_settings.storage_url.removeprefix("file://"))
    assert not storage.exists() or not any(p.is_file() for p in storage.rglob("*"))

    # more targets than a group may have: refused before any is read
    too_many = api.post("/v1/groups", json={**body, "targets": body["targets"][:1] * 5})
    assert too_many.status_code == 422 and too_many.json()["error"]["code"] == "group_too_large"

    # with partial, the good member goes ahead (rendered by a worker) and the refused one is listed
    farm.worker("w1")
    response = api.post("/v1/groups", json={**body, "partial": True})
    assert response.status_code == 202, response.text
    group = response.json()
    assert group["name"] == "by url" and len(group["job_ids"]) == 1
    assert [(r["index"], r["code"]) for r in group["refused"]] == [(1, "input_url_forbidden")]
    last_kind, last, _ = _stream(api, group["id"])[-1]
    assert last_kind == "end" and last["jobs"] == {"succeeded": 1}
    (job,) = api.get(f"/v1/groups/{group['id']}/jobs").json()["jobs"]
    assert job["target_name"] == "good.mp4" and job["status"] == "succeeded"
    assert job["progress"]["frames_total"] == 10
