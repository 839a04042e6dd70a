"""The API works as a least-privilege Postgres role (``shared.schema.API_GRANTS``, what ``swapfarm db upgrade
--api-role`` grants): submit, list, read, cancel and retry jobs, sign in and out of the console, its pages, the
metrics; and that role cannot change the schema or delete what the API never deletes."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from api.app import create_app
from shared.db import session_scope
from shared.models import Job, utcnow
from shared.schema import grant_api_role
from shared.settings import Settings
from shared.states import JobStatus
from tests.support.tenants import bearer, make_key

PASSTHROUGH = json.dumps({"processors": ["passthrough"]})


@pytest.fixture
def role(database_url: str) -> Iterator[str]:
    name = f"swapfarm_api_{uuid.uuid4().hex[:8]}"
    owner = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{name}" LOGIN')
    grant_api_role(database_url, name)
    yield name
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'DROP OWNED BY "{name}"')
        conn.execute(f'DROP ROLE "{name}"')


@pytest.fixture
def as_api(settings: Settings, role: str) -> Settings:
    return settings.model_copy(update={"database_url": settings.database_url.replace("://postgres@", f"://{role}@")})


def test_the_api_works_as_its_own_role(settings: Settings, as_api: Settings, clip_short: Path) -> None:
    key = make_key(settings)  # keys are made by the operator (``swapfarm keys create``), as the owner
    with TestClient(create_app(as_api)) as client:  # a server error (a refused statement) raises here
        client.headers.update(bearer(key))
        submitted = client.post(
            "/v1/jobs",
            files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
            data={"options": PASSTHROUGH, "callback_url": "http://93.184.215.14/hook"},
        )
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        assert [j["id"] for j in client.get("/v1/jobs").json()["jobs"]] == [job_id]
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        assert client.get(f"/v1/jobs/{job_id}/events").status_code == 200
        assert client.get(f"/v1/jobs/{job_id}/chunks").status_code == 200
        assert client.post(f"/v1/jobs/{job_id}/cancel").json()["status"] == "cancelled"  # queues its webhook too
        with session_scope(settings.database_url) as s:
            s.execute(update(Job).where(Job.id == job_id).values(status=JobStatus.FAILED, finished_at=utcnow()))
        assert client.post(f"/v1/jobs/{job_id}/retry").status_code == 202
        assert client.get("/v1/webhooks/secret").status_code == 200
        assert client.get("/readyz").status_code == 200
        assert client.get("/metrics").status_code == 200
        for page in ("/ui/jobs", f"/ui/jobs/{job_id}", "/ui/workers", "/ui/jobs/new"):
            assert client.get(page).status_code == 200, page
    with TestClient(create_app(as_api)) as browser:  # the console's sign-in opens a session row, sign-out ends it
        form = browser.get("/ui/sign-in")
        token = browser.cookies.get("swapfarm_sign_in")
        signed_in = browser.post("/ui/sign-in", data={"key": key, "csrf_token": token}, follow_redirects=False)
        assert signed_in.status_code == 303, (form.status_code, signed_in.text)
        jobs_page = browser.get("/ui/jobs")
        assert jobs_page.status_code == 200
        csrf = jobs_page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
        assert browser.post("/ui/sign-out", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE jobs",
        "ALTER TABLE jobs ADD COLUMN stolen text",
        "CREATE TABLE stolen (x int)",
        "TRUNCATE job_events",
        "DELETE FROM jobs",
        "DELETE FROM api_keys",
        "INSERT INTO api_keys (id) VALUES ('x')",
        "UPDATE alembic_version SET version_num = 'x'",
        "CREATE INDEX stolen ON jobs (id)",
    ],
)
def test_the_api_role_cannot_change_the_schema_or_delete_records(as_api: Settings, statement: str) -> None:
    with psycopg.connect(as_api.database_url.replace("+psycopg", ""), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute(statement)
