"""Who may do what: every data route needs a key, a tenant sees only its own jobs, a revoked key stops at once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from shared.db import session_scope
from shared.models import new_id
from shared.settings import Settings
from shared.tenants import revoke_key
from tests.support.tenants import bearer, make_key

# Routes that answer without a key: liveness/readiness, the API's own description, and Prometheus' scrape.
PUBLIC = {"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/metrics"}
PASSTHROUGH = json.dumps({"processors": ["passthrough"]})


@pytest.fixture
def app(settings: Settings) -> Iterator[FastAPI]:
    app = create_app(settings)
    with TestClient(app):  # runs the lifespan
        yield app


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every route of the API, as its OpenAPI description lists them."""
    paths: dict[str, dict[str, object]] = app.openapi()["paths"]
    return sorted((method.upper(), path) for path, operations in paths.items() for method in operations)


def _submit(client: TestClient, clip: Path, key: str, idempotency_key: str | None = None) -> str:
    headers = bearer(key) | ({"Idempotency-Key": idempotency_key} if idempotency_key else {})
    response = client.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip.read_bytes(), "video/mp4")},
        data={"options": PASSTHROUGH},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_every_route_but_the_public_ones_needs_a_key(app: FastAPI) -> None:
    client = TestClient(app)
    routes = _routes(app)
    assert {path for _, path in routes if path.startswith("/v1")}, "the API has /v1 routes"
    for method, path in routes:
        url = path.replace("{job_id}", new_id())
        if path in PUBLIC:
            continue
        for headers in ({}, bearer("sfk_not-a-key"), {"Authorization": "Basic dXNlcjpwYXNz"}):
            response = client.request(method, url, headers=headers)
            assert response.status_code == 401, (method, path, headers, response.text)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_another_tenants_job_is_not_found_on_every_route_and_nothing_leaks(
    app: FastAPI, settings: Settings, clip_short: Path
) -> None:
    client = TestClient(app)
    alice, bob = make_key(settings), make_key(settings)
    job_id = _submit(client, clip_short, alice, idempotency_key="same-key")
    # ended, so that its owner's event stream ends at once too
    assert client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(alice)).status_code == 200
    missing = new_id()
    job_routes = [(m, p) for m, p in _routes(app) if "{job_id}" in p]
    assert len(job_routes) >= 7
    for method, path in job_routes:
        theirs = client.request(method, path.replace("{job_id}", job_id), headers=bearer(bob))
        nobody = client.request(method, path.replace("{job_id}", missing), headers=bearer(bob))
        assert theirs.status_code == nobody.status_code == 404, (method, path)
        assert theirs.json() == json.loads(nobody.text.replace(missing, job_id)), "the answers must not differ"
        assert set(theirs.headers) == set(nobody.headers)
        mine = client.request(method, path.replace("{job_id}", job_id), headers=bearer(alice))
        assert mine.status_code != 404, (method, path, mine.text)
    listed = client.get("/v1/jobs", headers=bearer(bob)).json()
    assert listed == {"jobs": [], "next_cursor": None}
    # the same Idempotency-Key is per tenant: bob gets his own job, not alice's and not a conflict
    assert _submit(client, clip_short, bob, idempotency_key="same-key") != job_id
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer(alice)).json()["status"] == "cancelled"


def test_an_admin_key_sees_every_tenant_and_others_may_not_ask(
    app: FastAPI, settings: Settings, clip_short: Path
) -> None:
    client = TestClient(app)
    alice, bob, admin = make_key(settings), make_key(settings), make_key(settings, admin=True)
    jobs = {_submit(client, clip_short, alice), _submit(client, clip_short, bob)}
    assert client.get(f"/v1/jobs/{min(jobs)}", headers=bearer(admin)).status_code == 200
    everyone = client.get("/v1/jobs", params={"all_tenants": "true", "limit": 200}, headers=bearer(admin)).json()
    assert jobs <= {j["id"] for j in everyone["jobs"]}
    assert all(j["tenant"] for j in everyone["jobs"] if j["id"] in jobs)
    refused = client.get("/v1/jobs", params={"all_tenants": "true"}, headers=bearer(alice))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"


def test_a_revoked_key_stops_working_at_its_next_request(app: FastAPI, settings: Settings) -> None:
    client = TestClient(app)
    key = make_key(settings)
    assert client.get("/v1/jobs", headers=bearer(key)).status_code == 200
    with session_scope(settings.database_url) as session:
        revoke_key(session, key[:12])
    response = client.get("/v1/jobs", headers=bearer(key))
    assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"
