"""In production a callback URL that points inside the farm's network is refused when the job is submitted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.tenants import bearer, make_key

INTERNAL = [
    "https://127.0.0.1/hook",
    "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "https://localhost:8443/hook",
    "https://[::1]/hook",
]


@pytest.fixture
def production(settings: Settings) -> Iterator[TestClient]:
    live = Settings.model_validate(settings.model_dump() | {"environment": "production", "secret_key": "s" * 32})
    with TestClient(create_app(live)) as client:
        client.headers.update(bearer(make_key(settings)))
        yield client


def _stored(settings: Settings) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://"))
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.mark.parametrize("url", INTERNAL)
def test_internal_callback_urls_are_refused_at_submission(
    production: TestClient, settings: Settings, clip_short: Path, url: str
) -> None:
    response = production.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options": json.dumps({"processors": ["passthrough"]}), "callback_url": url},
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "callback_url_forbidden"
    refused = production.post(
        "/v1/jobs", json={"target": {"url": "s3://media/clip.mp4"}, "callback_url": url}
    )  # the JSON form is checked the same way, before any input is read
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "callback_url_forbidden"
    assert production.get("/v1/jobs").json()["jobs"] == []
    assert _stored(settings) == []


def test_plain_http_callbacks_are_refused_in_production(production: TestClient, clip_short: Path) -> None:
    response = production.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"callback_url": "http://hooks.example.com/swapfarm"},
    )
    assert response.status_code == 422 and response.json()["error"]["code"] == "callback_url_invalid"


def test_the_webhook_secret_is_the_tenants_own(production: TestClient, settings: Settings) -> None:
    mine = production.get("/v1/webhooks/secret").json()["secret"]
    theirs = production.get("/v1/webhooks/secret", headers=bearer(make_key(settings))).json()["secret"]
    assert mine.startswith("whsec_") and theirs.startswith("whsec_") and mine != theirs
