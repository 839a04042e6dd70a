"""Job groups through real Celery workers: a batch of targets with one option set, one ZIP, one webhook."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared.db import session_scope
from shared.media import probe
from shared.models import Job, JobGroup
from shared.settings import Settings
from tests.support.farm import Farm, settings_env, wait_for
from tests.support.live import live_api
from tests.support.media import make_clip
from tests.support.receiver import receiver
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}}


@pytest.fixture
def group_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "webhook_allowed_networks": [ip_network("127.0.0.0/8")],  # the test receiver is on the loopback
            "webhook_retry_base_seconds": 0.2,
            "webhook_poll_seconds": 0.3,
            "max_group_members": 6,
        }
    )


@pytest.fixture
def group_farm(group_settings: Settings, tmp_path: Path) -> Iterator[Farm]:
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(group_settings, logs)
    yield farm
    farm.stop()


@pytest.fixture
def group_api(group_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(group_settings), headers=bearer(make_key(group_settings))) as client:
        yield client


@pytest.fixture
def tiny(tmp_path: Path) -> list[Path]:
    """Five tiny clips of different lengths (64x64, 8 to 16 frames)."""
    return [
        make_clip(tmp_path / f"take {i}.mp4", seconds=(8 + 2 * i) / 16, size="64x64", rate="16", audio=i % 2 == 0)
        for i in range(5)
    ]


def _rows(settings: Settings) -> tuple[int, int]:
    with session_scope(settings.database_url) as s:
        jobs = s.scalar(select(func.count()).select_from(Job)) or 0
        return jobs, s.scalar(select(func.count()).select_from(JobGroup)) or 0


def _post(api: TestClient, targets: list[Path], **data: str) -> Any:
    files = [("target", (t.name, t.read_bytes(), "video/mp4")) for t in targets]
    return api.post("/v1/groups", files=files, data={"options": json.dumps(PASSTHROUGH), **data})


def test_a_group_of_five_targets_renders_each_and_downloads_as_one_zip_with_one_webhook(
    group_farm: Farm, group_api: TestClient, group_settings: Settings, tiny: list[Path], tmp_path: Path
) -> None:
    group_farm.worker("w1")
    group_farm.beat()  # delivers webhooks
    with receiver([200]) as hooks:
        response = _post(group_api, tiny, name="five takes", callback_url=hooks.url)
        assert response.status_code == 202, response.text
        group = response.json()
        assert response.headers["location"] == f"/v1/groups/{group['id']}"
        assert group["name"] == "five takes" and len(group["job_ids"]) == 5 and group["status"] == "active"

        def ended() -> dict[str, Any] | None:
            body: dict[str, Any] = group_api.get(f"/v1/groups/{group['id']}").json()
            return body if body["status"] != "active" else None

        body: Any = wait_for(ended, timeout=300, what="the group's last job to end")
        assert body["status"] == "succeeded" and body["jobs"] == {"succeeded": 5}, body
        assert body["progress"]["percent"] == 100.0 and body["progress"]["frames_total"] == sum(
            8 + 2 * i for i in range(5)
        )
        wait_for(lambda: hooks.requests, timeout=60, what="the group's webhook")
        jobs = group_api.get(f"/v1/groups/{group['id']}/jobs").json()["jobs"]
        assert [j["target_name"] for j in jobs] == [t.name for t in tiny]
        assert {j["group_id"] for j in jobs} == {group["id"]}
        events = group_api.get(f"/v1/groups/{group['id']}/events").json()["events"]
        assert sum(e["kind"] == "succeeded" for e in events) == 5
        assert [e["job_id"] for e in events if e["kind"] == "group_finished"] == [group["id"]]

        # the console lists the group and opens its jobs
        assert f'href="/ui/groups/{group["id"]}"' in group_api.get("/ui/groups").text
        page = group_api.get(f"/ui/groups/{group['id']}").text
        assert all(f'href="/ui/jobs/{j["id"]}"' in page for j in jobs) and f"/v1/groups/{group['id']}/output" in page

        download = group_api.get(f"/v1/groups/{group['id']}/output")
        assert download.status_code == 200 and download.headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
            names = archive.namelist()
            assert names == [f"{i + 1:03d}-take_{i}.mp4" for i in range(5)]
            for i, name in enumerate(names):
                out = tmp_path / f"out-{i}.mp4"
                out.write_bytes(archive.read(name))
                assert probe(out).frame_count == 8 + 2 * i  # each member's own video, every frame
        # one webhook for the group (the members have none of their own), even after the beat's next sweeps
        (hook,) = hooks.requests
        payload = json.loads(hook.body)
        assert payload["type"] == "group.finished" and payload["data"]["jobs"] == {"succeeded": 5}


def test_a_member_that_fails_intake_refuses_the_whole_group_naming_it_and_stores_nothing(
    group_api: TestClient, group_settings: Settings, tiny: list[Path], tmp_path: Path
) -> None:
    bad = tmp_path / "notes.mp4"
    bad.write_bytes(b"not a video at all\n" * 8)  # no container ffprobe reads
    before = _rows(group_settings)
    response = _post(group_api, [tiny[0], bad, tiny[1]])
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "group_member_refused" and "member 2 ('notes.mp4')" in error["message"]
    storage = Path(group_settings.storage_url.removeprefix("file://"))
    assert _rows(group_settings) == before  # no job, no group
    assert not storage.exists() or not any(p.is_file() for p in storage.rglob("*"))

    # with partial, the good members go ahead and the answer lists the refused one
    response = _post(group_api, [tiny[0], bad, tiny[1]], partial="true")
    assert response.status_code == 202, response.text
    body = response.json()
    assert len(body["job_ids"]) == 2
    assert [(r["index"], r["target_name"], r["code"]) for r in body["refused"]] == [
        (1, "notes.mp4", "media_unreadable")
    ]

    # pause and resume reach every member (no worker runs here: they wait), through the jobs' own controls
    paused = group_api.post(f"/v1/groups/{body['id']}/pause").json()
    assert paused["jobs"] == {"paused": 2} and paused["status"] == "active"
    resumed = group_api.post(f"/v1/groups/{body['id']}/resume").json()
    assert "paused" not in resumed["jobs"] and sum(resumed["jobs"].values()) == 2
    cancelled = group_api.post(f"/v1/groups/{body['id']}/cancel").json()
    assert cancelled["jobs"] == {"cancelled": 2} and cancelled["status"] == "cancelled"
    assert group_api.get(f"/v1/groups/{body['id']}/output").json()["error"]["code"] == "output_not_ready"

    # limits: members per group
    response = _post(group_api, [tiny[0]] * 7)
    assert response.status_code == 422 and response.json()["error"]["code"] == "group_too_large"
    # another tenant's group is not found
    other = group_api.get(f"/v1/groups/{body['id']}", headers=bearer(make_key(group_settings)))
    assert other.status_code == 404


def test_the_cli_makes_a_group_of_several_targets_or_a_glob(
    group_settings: Settings, tiny: list[Path], tmp_path: Path
) -> None:
    key = make_key(group_settings)
    logs = tmp_path / "api-logs"
    logs.mkdir()
    with live_api(group_settings, logs) as server, TestClient(create_app(group_settings), headers=bearer(key)) as api:
        env = {**settings_env(group_settings), "SWAPFARM_API_URL": server.url, "SWAPFARM_API_KEY": key}

        def cli(*args: str) -> list[str]:
            done = subprocess.run(
                [sys.executable, "-m", "cli", "submit", *args, "--options", json.dumps(PASSTHROUGH)],
                env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            return done.stdout.split()

        group_id, *job_ids = cli(str(tiny[0]), str(tiny[1]), "--name", "two")
        body = api.get(f"/v1/groups/{group_id}").json()
        assert body["name"] == "two" and body["job_ids"] == job_ids and len(job_ids) == 2
        group_id, *job_ids = cli(str(tmp_path / "take *.mp4"))  # quoted: the CLI expands it, sorted
        jobs = api.get(f"/v1/groups/{group_id}/jobs").json()["jobs"]
        assert [j["target_name"] for j in jobs] == [t.name for t in tiny] and [j["id"] for j in jobs] == job_ids
        listed = api.get("/v1/groups").json()["groups"]
        assert [g["id"] for g in listed][:1] == [group_id]
