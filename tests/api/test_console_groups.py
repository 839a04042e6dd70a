"""The console's group buttons without a browser: CSRF on each, another tenant's group not found, an unknown action
not found, and each button (pause, pause now, resume, cancel, retry) doing to every member what
``POST /v1/groups/{id}/…`` does."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.app import create_app
from shared.db import session_scope
from shared.models import Job, utcnow
from shared.settings import Settings
from tests.api.test_console import _sign_in
from tests.support.tenants import bearer, make_key

PAUSED = json.dumps({"processors": ["passthrough"], "start_paused": True})


@pytest.fixture
def app_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        yield client


def test_the_group_buttons_need_the_csrf_token_and_reach_every_member(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    files = [("target", (f"take-{i}.mp4", clip_short.read_bytes(), "video/mp4")) for i in range(2)]
    made = app_client.post("/v1/groups", files=files, data={"options": PAUSED, "name": "takes"}, headers=bearer(key))
    assert made.status_code == 202, made.text
    group_id = made.json()["id"]

    def members() -> dict[str, int]:
        return dict(app_client.get(f"/v1/groups/{group_id}", headers=bearer(key)).json()["jobs"])

    csrf = _sign_in(app_client, key)
    listed = app_client.get("/ui/groups").text
    assert f'action="/ui/groups/{group_id}/resume"' in listed and f'action="/ui/groups/{group_id}/pause"' not in listed

    forged = app_client.post(f"/ui/groups/{group_id}/resume", data={"csrf_token": "forged"})
    assert forged.status_code == 403 and members() == {"paused": 2}
    unknown = app_client.post(f"/ui/groups/{group_id}/retry-everything", data={"csrf_token": csrf})
    assert unknown.status_code == 404 and members() == {"paused": 2}

    other = TestClient(app_client.app, follow_redirects=False)  # another browser, another tenant's session
    try:
        theirs = other.post(f"/ui/groups/{group_id}/cancel", data={"csrf_token": _sign_in(other, make_key(settings))})
    finally:
        other.close()
    assert theirs.status_code == 404 and members() == {"paused": 2}

    resumed = app_client.post(f"/ui/groups/{group_id}/resume", data={"csrf_token": csrf, "back": "list"})
    assert resumed.status_code == 303 and resumed.headers["location"] == "/ui/groups"
    assert "paused" not in members() and sum(members().values()) == 2
    page = app_client.get(f"/ui/groups/{group_id}").text
    assert f'action="/ui/groups/{group_id}/pause"' in page and f'action="/ui/groups/{group_id}/resume"' not in page

    cancelled = app_client.post(f"/ui/groups/{group_id}/cancel", data={"csrf_token": csrf, "back": "//elsewhere"})
    assert cancelled.status_code == 303 and cancelled.headers["location"] == f"/ui/groups/{group_id}"
    assert members() == {"cancelled": 2}
    assert "/ui/groups/" + group_id + "/cancel" not in app_client.get(f"/ui/groups/{group_id}").text


def test_a_group_is_paused_now_while_a_member_renders_and_its_failed_member_retried_from_its_page(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    files = [("target", (f"take-{i}.mp4", clip_short.read_bytes(), "video/mp4")) for i in range(2)]
    made = app_client.post("/v1/groups", files=files, data={"options": PAUSED, "name": "takes"}, headers=bearer(key))
    assert made.status_code == 202, made.text
    group_id, (first, second) = made.json()["id"], made.json()["job_ids"]
    with session_scope(settings.database_url) as s:  # one member renders, the other failed
        s.execute(update(Job).where(Job.id == first).values(status="rendering"))
        s.execute(update(Job).where(Job.id == second).values(status="failed", finished_at=utcnow()))

    def members() -> dict[str, int]:
        return dict(app_client.get(f"/v1/groups/{group_id}", headers=bearer(key)).json()["jobs"])

    csrf = _sign_in(app_client, key)
    page = app_client.get(f"/ui/groups/{group_id}").text
    assert f'action="/ui/groups/{group_id}/pause-now"' in page and f'action="/ui/groups/{group_id}/retry"' in page
    paused = app_client.post(f"/ui/groups/{group_id}/pause-now", data={"csrf_token": csrf})
    assert paused.status_code == 303 and members() == {"paused": 1, "failed": 1}
    retried = app_client.post(f"/ui/groups/{group_id}/retry", data={"csrf_token": csrf})
    assert retried.status_code == 303 and retried.headers["location"] == f"/ui/groups/{group_id}"
    assert "failed" not in members() and members()["paused"] == 1
    assert f'action="/ui/groups/{group_id}/retry"' not in app_client.get(f"/ui/groups/{group_id}").text
