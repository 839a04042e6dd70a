"""The controls against a real API server (``swapfarm api`` in its own process, one for the module): from a
terminal, a job's ``pause`` (``--now``), ``resume``, ``approve``, ``reject``; an admin's ``release-worker``; a
group's ``group status|pause|resume|cancel|retry|download`` (each refusal prints the API's stable code and exits
1); and the job's event stream announcing a preview that awaits approval as it happens.

No worker runs: where a worker would have rendered (a preview's chunk, a member that failed or succeeded), the
test moves the rows with the farm's own functions (``shared.jobs``, ``shared.previewing``, ``shared.lifecycle``),
and the command is run in-process (Typer's runner) against the live server, as a terminal would run it.
"""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from sqlalchemy import delete, select, update
from typer.testing import CliRunner

from cli.main import app
from shared import jobs, lifecycle, previewing
from shared.db import session_scope
from shared.errors import WorkerLostError
from shared.models import Chunk, Job, WorkerPresence, utcnow
from shared.settings import Settings
from shared.storage import Storage
from tests.support.live import LiveApi, live_api
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}}


@pytest.fixture(scope="module")
def server(module_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    with live_api(module_settings, tmp_path_factory.mktemp("api-logs")) as api:
        yield api


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    return make_clip(tmp_path / "take.mp4", seconds=0.5, size="64x64", rate="16")  # 8 frames


def _cli(server: LiveApi, key: str, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--url", server.url, "--key", key])


def _ok(result: Result) -> str:
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def _refused(result: Result, code: str) -> None:
    assert result.exit_code == 1 and code in result.stderr, (result.stdout, result.stderr)


def _submit(server: LiveApi, key: str, clip: Path, **options: Any) -> str:
    response = httpx.post(
        f"{server.url}/v1/jobs", files={"target": (clip.name, clip.read_bytes(), "video/mp4")},
        data={"options": json.dumps({**PASSTHROUGH, **options})}, headers=bearer(key), timeout=60,
    )  # fmt: skip
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _status(settings: Settings, job_id: str) -> str:
    with session_scope(settings.database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        return str(job.status)


def _preview_rendered(settings: Settings, job_id: str) -> None:
    """What the planner and a worker do for a ``preview: 1`` job: two chunks, the second the preview's frame,
    rendered; the first held; the job awaiting approval."""
    url = settings.database_url
    with session_scope(url) as s:
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
    plans = [jobs.ChunkPlan(0, 0, 4, 0.0), jobs.ChunkPlan(1, 4, 5, 0.25, preview=True)]
    with session_scope(url) as s:
        jobs.record_plan(s, job_id, token, plans, {}, "any")
        preview = s.scalar(select(Chunk.id).where(Chunk.job_id == job_id, Chunk.index == 1))
        assert preview is not None
        claim = jobs.claim_chunk(s, preview, worker="w", family="cpu", lease_seconds=60)
        assert claim is not None
    with session_scope(url) as s:
        jobs.finish_chunk(s, claim, "file:///c/1.mp4", 0.1)
    with session_scope(url) as s:
        assert previewing.await_approval(s, job_id, 3600)


def test_a_job_is_paused_resumed_approved_and_rejected_from_the_cli(
    server: LiveApi, settings: Settings, clip: Path
) -> None:
    key = make_key(settings)
    paused = _submit(server, key, clip, start_paused=True)
    assert _ok(_cli(server, key, "resume", paused)).startswith(f"{paused} queued")
    assert _ok(_cli(server, key, "pause", paused, "--now")).startswith(f"{paused} paused")
    assert _ok(_cli(server, key, "pause", paused)).startswith(f"{paused} paused"), "paused again: no change"
    _refused(_cli(server, key, "approve", paused), "job_not_awaiting_approval")
    _refused(_cli(server, make_key(settings), "resume", paused), "not_found")  # another tenant's job

    approved, rejected = (_submit(server, key, clip, preview=1) for _ in range(2))
    for job_id in (approved, rejected):
        _preview_rendered(settings, job_id)
    _refused(_cli(server, key, "resume", approved), "job_not_resumable")
    assert _ok(_cli(server, key, "approve", approved)).startswith(f"{approved} rendering")
    assert _ok(_cli(server, key, "reject", rejected)).startswith(f"{rejected} cancelled")
    _refused(_cli(server, key, "reject", rejected), "job_not_awaiting_approval")
    with session_scope(settings.database_url) as s:
        held = s.scalars(select(Chunk.status).where(Chunk.job_id == approved).order_by(Chunk.index))
        assert list(held) == ["queued", "done"], "approving queued the rest"


def test_an_admin_releases_a_quarantined_worker_from_the_cli(server: LiveApi, settings: Settings) -> None:
    name = f"cpu-{uuid.uuid4().hex[:8]}@host-q"
    with session_scope(settings.database_url) as s:
        s.add(WorkerPresence(name=name, hostname="host-q", family="cpu", quarantined_at=utcnow()))
    admin = make_key(settings, admin=True)
    try:
        _refused(_cli(server, make_key(settings), "release-worker", name), "forbidden")
        assert _ok(_cli(server, admin, "release-worker", name)).strip() == f"{name}: released"
        with session_scope(settings.database_url) as s:
            row = s.get(WorkerPresence, name)
            assert row is not None and row.quarantined_at is None
        _refused(_cli(server, admin, "release-worker", name), "worker_not_quarantined")
        _refused(_cli(server, admin, "release-worker", "nobody@nowhere"), "not_found")
    finally:
        with session_scope(settings.database_url) as s:
            s.execute(delete(WorkerPresence).where(WorkerPresence.name == name))


def test_a_group_is_shown_paused_resumed_retried_cancelled_and_downloaded_from_the_cli(
    server: LiveApi, settings: Settings, clip: Path, tmp_path: Path
) -> None:
    key = make_key(settings)
    second = clip.with_name("second take.mp4")
    second.write_bytes(clip.read_bytes())
    made = _ok(
        _cli(
            server,
            key,
            "submit",
            str(clip),
            str(second),
            "--options",
            json.dumps({**PASSTHROUGH, "start_paused": True}),
        )
    )
    group_id, *members = made.split()

    shown = _ok(_cli(server, key, "group", "status", group_id)).splitlines()
    assert shown[0].startswith(f"{group_id} active") and shown[0].endswith("2 paused"), shown
    assert [line.split(": ")[0].strip() for line in shown[1:]] == ["take.mp4", "second take.mp4"]
    assert [line.split(": ")[1].split()[:2] for line in shown[1:]] == [[m, "paused"] for m in members]
    assert "paused" not in _ok(_cli(server, key, "group", "resume", group_id))
    assert _ok(_cli(server, key, "group", "pause", group_id, "--now")).strip().endswith("2 paused")
    listed = json.loads(_ok(_cli(server, key, "group", "status", group_id, "--json")))
    assert listed["group"]["jobs"] == {"paused": 2} and [j["id"] for j in listed["jobs"]] == members
    _refused(_cli(server, key, "group", "download", group_id, "-o", str(tmp_path / "none.zip")), "output_not_ready")

    # as a worker's last failed attempt and a stitch would leave them: the first member failed, the second done
    with session_scope(settings.database_url) as s:
        lifecycle.fail_job(s, members[0], WorkerLostError("the worker was lost"), default_limit=100)
    storage = Storage.from_settings(settings)
    output = storage.job_url(members[1], "output.mp4")
    with storage.open_write(output) as handle:
        handle.write(second.read_bytes())
    with session_scope(settings.database_url) as s:
        s.execute(update(Job).where(Job.id == members[1]).values(status="succeeded", output_url=output))
    retried = _ok(_cli(server, key, "group", "retry", group_id))
    assert "failed" not in retried and "1 succeeded" in retried
    assert _status(settings, members[0]) in {"waiting", "queued"}
    assert _ok(_cli(server, key, "group", "cancel", group_id)).strip().endswith("1 cancelled, 1 succeeded")

    zipped = tmp_path / "takes.zip"
    _ok(_cli(server, key, "group", "download", group_id, "-o", str(zipped)))
    with zipfile.ZipFile(io.BytesIO(zipped.read_bytes())) as archive:
        assert archive.namelist() == ["002-second_take.mp4"]
        assert archive.read("002-second_take.mp4") == second.read_bytes()
    _refused(_cli(server, make_key(settings), "group", "status", group_id), "not_found")


def _blocks(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """A server-sent event stream's blocks: (``event``, its JSON ``data``)."""
    kind, data = "", ""
    for line in lines:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif line == "" and data:
            yield kind, json.loads(data)
            kind, data = "", ""


def test_the_event_stream_announces_a_preview_awaiting_approval_as_it_happens(
    server: LiveApi, settings: Settings, clip: Path
) -> None:
    key = make_key(settings)
    job_id = _submit(server, key, clip, preview=1)
    url = f"{server.url}/v1/jobs/{job_id}/events/stream"
    timeout = httpx.Timeout(30.0)  # a stream that stops sending fails the test instead of hanging it
    with httpx.stream("GET", url, headers=bearer(key), timeout=timeout) as response:
        assert response.status_code == 200
        blocks = _blocks(response.iter_lines())
        for kind, data in blocks:  # the log so far, sent first
            if kind == "event" and data["kind"] == "admitted":
                break
        _preview_rendered(settings, job_id)  # from here on the stream is live
        announced: dict[str, Any] = {}
        for kind, data in blocks:
            if kind == "event" and data["kind"] == "awaiting_approval":
                announced = data
            if announced and kind == "job" and data["status"] == "awaiting_approval":
                break
        else:
            raise AssertionError(f"the stream ended without announcing the preview: {announced}")
    assert announced["status"] == "awaiting_approval" and "approve" in announced["message"], announced
