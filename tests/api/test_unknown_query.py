"""A query parameter a route does not take is refused, not ignored: ``422 query_parameter_unknown`` on every route
of the API, before it acts (a misspelt filter, ``GET /v1/jobs?stauts=failed``, once listed every job)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.api.test_query_bounds import _routes
from tests.support.tenants import bearer, make_key


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    app = create_app(settings)
    with TestClient(app, headers=bearer(make_key(settings))) as client:
        yield client


def _submit(client: TestClient, clip: Path, **params: str) -> object:
    return client.post(
        "/v1/jobs",
        params=params,
        files={"target": ("clip.mp4", clip.read_bytes(), "video/mp4")},
        data={"options": json.dumps({"processors": ["passthrough"]})},
    )


def test_a_misspelt_filter_is_refused_and_the_spelt_one_filters(client: TestClient, clip_short: Path) -> None:
    made = _submit(client, clip_short)
    assert made.status_code == 202, made.text  # type: ignore[attr-defined]
    misspelt = client.get("/v1/jobs", params={"stauts": "failed"})
    assert misspelt.status_code == 422
    assert misspelt.json()["error"]["code"] == "query_parameter_unknown"
    assert "'stauts'" in misspelt.json()["error"]["message"]
    assert client.get("/v1/jobs", params={"status": "failed"}).json()["jobs"] == []
    assert len(client.get("/v1/jobs", params={"all_tenants": "false", "limit": "5"}).json()["jobs"]) == 1


def test_a_submission_with_an_unknown_parameter_makes_no_job(client: TestClient, clip_short: Path) -> None:
    refused = _submit(client, clip_short, priorty="9")
    assert refused.status_code == 422, refused.text  # type: ignore[attr-defined]
    assert refused.json()["error"]["code"] == "query_parameter_unknown"  # type: ignore[attr-defined]
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_every_route_of_the_api_refuses_a_parameter_it_does_not_take(client: TestClient, clip_short: Path) -> None:
    job_id = _submit(client, clip_short).json()["id"]  # type: ignore[attr-defined]
    app: FastAPI = client.app  # type: ignore[assignment]
    routes = [r for r in _routes(app.routes) if r.path.startswith("/v1/")]
    assert len(routes) >= 30
    for route in routes:
        url = route.path.replace("{job_id}", job_id).replace("{group_id}", "0" * 32)
        url = url.replace("{name}", "w1@test").replace("{still}", "00-before.jpg")
        for method in sorted(route.methods):
            response = client.request(method, url, params={"unknown_parameter": "1"})
            assert response.status_code == 422, (method, route.path, response.text)
            assert response.json()["error"]["code"] == "query_parameter_unknown", (method, route.path, response.text)
    assert client.get(f"/v1/jobs/{job_id}").json()["status"] != "cancelled"  # the cancel refused did nothing
