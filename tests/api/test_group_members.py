"""Each member of a group is examined as a job would be (``shared.submission.check``) before the first is made: a
member whose file is no video refuses the group, naming the member and its own code, or with ``partial`` is listed
as refused while the others go ahead."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.tenants import bearer, make_key

PASSTHROUGH = json.dumps({"processors": ["passthrough"]})


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_member_that_is_no_video_refuses_the_group_or_alone_with_partial(
    client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    files = [
        ("target", ("take-1.mp4", clip_short.read_bytes(), "video/mp4")),
        ("target", ("take-2.mp4", bytes(range(256)) * 64, "video/mp4")),
    ]
    whole = client.post("/v1/groups", files=files, data={"options": PASSTHROUGH}, headers=bearer(key))
    assert whole.status_code == 422, whole.text
    error = whole.json()["error"]
    assert error["code"] == "group_member_refused"
    assert "member 2" in error["message"] and "media_unreadable" in error["message"], error
    assert client.get("/v1/jobs", headers=bearer(key)).json()["jobs"] == []  # nothing made

    partial = client.post(
        "/v1/groups", files=files, data={"options": PASSTHROUGH, "partial": "true"}, headers=bearer(key)
    )
    assert partial.status_code == 202, partial.text
    body = partial.json()
    assert len(body["job_ids"]) == 1
    assert [(r["index"], r["code"]) for r in body["refused"]] == [(1, "media_unreadable")]
