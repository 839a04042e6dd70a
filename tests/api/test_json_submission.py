"""``POST /v1/jobs`` with a JSON body: inputs referenced by URL, read only under the prefixes the operator allows."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.tenants import bearer, make_key


@pytest.fixture
def media(tmp_path: Path, clip_short: Path) -> Path:
    folder = tmp_path / "media"
    folder.mkdir()
    shutil.copy(clip_short, folder / "clip.mp4")
    (tmp_path / "secret.mp4").write_bytes(clip_short.read_bytes())
    os.symlink(tmp_path / "secret.mp4", folder / "link.mp4")
    return folder


@pytest.fixture
def client(settings: Settings, media: Path) -> Iterator[TestClient]:
    allowed = settings.model_copy(update={"input_url_prefixes": [f"file://{media}/"]})
    with TestClient(create_app(allowed), headers=bearer(make_key(settings))) as client:
        yield client


def test_a_job_from_a_url_under_an_allowed_prefix(client: TestClient, media: Path) -> None:
    body = {
        "target": {"url": f"file://{media}/clip.mp4", "name": "interview.mp4"},
        "options": {"processors": ["passthrough"], "encoder": {"quality": 90}},
        "priority": 7,
    }
    response = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "from-the-bucket"})
    assert response.status_code == 202, response.text
    job = response.json()
    assert (job["target_name"], job["priority"], job["status"]) == ("interview.mp4", 7, "queued")
    again = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "from-the-bucket"})
    assert again.status_code == 202 and again.json()["id"] == job["id"]


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("file:///etc/passwd", "input_url_forbidden"),
        ("file://{media}/../secret.mp4", "input_url_invalid"),
        ("file://{media}/link.mp4", "input_url_forbidden"),  # a symbolic link out of the prefix
        ("file://{media}x/clip.mp4", "input_url_forbidden"),  # a sibling folder sharing the prefix's text
        ("http://169.254.169.254/latest/meta-data", "input_url_invalid"),
        ("file://{media}/missing.mp4", "input_missing"),
        ("file://{media}", "input_url_forbidden"),
    ],
)
def test_references_outside_the_allowed_prefixes_are_refused(
    client: TestClient, media: Path, url: str, code: str
) -> None:
    response = client.post("/v1/jobs", json={"target": {"url": url.format(media=media)}})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == code
    assert client.get("/v1/jobs").json()["jobs"] == []


def test_without_prefixes_no_reference_is_read(settings: Settings, media: Path) -> None:
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as client:
        response = client.post("/v1/jobs", json={"target": {"url": f"file://{media}/clip.mp4"}})
    assert response.status_code == 422 and response.json()["error"]["code"] == "input_url_forbidden"


def test_bad_options_in_a_json_body_name_the_field(client: TestClient, media: Path) -> None:
    body = {"target": {"url": f"file://{media}/clip.mp4"}, "options": {"encoder": {"quality": 101}}}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "options_invalid"
    assert "options.encoder.quality" in response.json()["error"]["message"]
