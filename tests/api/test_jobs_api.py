"""The submission API against the real Postgres and Redis (in-process app, real ffprobe)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared.db import session_scope
from shared.models import Job
from shared.settings import Settings
from shared.tasks import CONTROL_QUEUE, PLAN
from tests.support.tenants import bearer


@pytest.fixture
def client(settings: Settings, api_key: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=bearer(api_key)) as client:
        yield client


def _job_count(settings: Settings) -> int:
    with session_scope(settings.database_url) as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def _stored_files(settings: Settings) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://"))
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_a_video_is_accepted_stored_and_queued_for_planning(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    response = client.post(
        "/v1/jobs",
        files={"target": ("my clip.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options": json.dumps({"processors": ["passthrough"]})},
    )
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and body["target_name"] == "my clip.mp4"
    broker = redis.Redis.from_url(settings.broker_url)
    # one list per priority level: the queue's name, then the name with a separator and the level
    messages = [m for key in broker.keys(f"{CONTROL_QUEUE}*") for m in broker.lrange(key, 0, -1)]
    headers = [json.loads(m)["headers"] for m in messages]
    assert any(h["task"] == PLAN and body["id"] in h["argsrepr"] + h["kwargsrepr"] for h in headers)
    assert client.get(f"/v1/jobs/{body['id']}").json()["status"] == "queued"
    assert len(_stored_files(settings)) == 1


@pytest.mark.parametrize(
    ("name", "content", "code"),
    [
        ("notes.mp4", b"this is not a video at all", "media_unreadable"),
        ("empty.mp4", b"", "media_unreadable"),
    ],
)
def test_a_target_that_is_not_a_video_is_refused_and_nothing_is_stored(
    client: TestClient, settings: Settings, name: str, content: bytes, code: str
) -> None:
    before = _job_count(settings)
    response = client.post("/v1/jobs", files={"target": (name, content, "video/mp4")})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == code
    assert _job_count(settings) == before
    assert _stored_files(settings) == []


def test_an_image_is_not_a_video(client: TestClient, settings: Settings, data_dir: Path) -> None:
    image = (data_dir / "media" / "s0.jpg").read_bytes()
    response = client.post("/v1/jobs", files={"target": ("photo.mp4", image, "video/mp4")})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "media_not_video"
    assert _stored_files(settings) == []


def test_a_source_that_is_not_an_image_is_refused(client: TestClient, settings: Settings, clip_short: Path) -> None:
    response = client.post(
        "/v1/jobs",
        files=[
            ("target", ("clip.mp4", clip_short.read_bytes(), "video/mp4")),
            ("source", ("face.jpg", b"GIF89a broken", "image/jpeg")),
        ],
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "source_invalid"
    assert _stored_files(settings) == []


def test_a_face_swap_without_a_source_is_refused(client: TestClient, clip_short: Path) -> None:
    response = client.post("/v1/jobs", files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "options_invalid"


def test_bad_options_name_the_field(client: TestClient, clip_short: Path) -> None:
    response = client.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options": json.dumps({"processors": ["passthrough"], "chunk_frames": -1})},
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "options_invalid" and "chunk_frames" in error["message"]


def test_an_unknown_job_is_404_with_a_code(client: TestClient) -> None:
    response = client.get("/v1/jobs/doesnotexist")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert client.get("/v1/jobs/doesnotexist/output").status_code == 404


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "broker": "ok"}


def test_readiness_fails_when_the_broker_is_unreachable(settings: Settings) -> None:
    broken = settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with TestClient(create_app(broken)) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["broker"].startswith("error")
