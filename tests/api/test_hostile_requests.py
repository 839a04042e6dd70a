"""Requests that would hold or fill the farm, against the real API (a uvicorn process where connections matter):
per-key caps on uploads and event streams, the upload read timeout, revoked keys ending their streams, the admin
band, tenants' quotas, paged chunks, and oddities that must answer 4xx with a code, never a 500."""

from __future__ import annotations

import json
import select as io_select
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared import control, jobs
from shared.db import session_scope
from shared.jobs import ChunkPlan
from shared.models import Job
from shared.settings import Settings
from shared.tenants import authenticate, revoke_key
from tests.support.farm import wait_for
from tests.support.live import LiveApi, live_api
from tests.support.tenants import bearer, make_key

BOUNDARY = "----swapfarm-hostile"
PASSTHROUGH = json.dumps({"processors": ["passthrough"]})


@pytest.fixture(autouse=True)
def _no_job_left_behind(settings: Settings) -> Iterator[None]:
    """Jobs made here wait for workers that never come: cancel them, or another module's farm would render them."""
    with session_scope(settings.database_url) as s:
        before = set(s.scalars(select(Job.id)))
    yield
    with session_scope(settings.database_url) as s:
        for job_id in set(s.scalars(select(Job.id))) - before:
            control.cancel_job(s, job_id, settings.max_running_jobs_per_tenant)


@pytest.fixture
def capped(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"max_uploads_per_key": 2, "max_streams_per_key": 2, "upload_read_timeout_seconds": 3.0}
    )


@pytest.fixture
def server(capped: Settings, tmp_path: Path) -> Iterator[LiveApi]:
    logs = tmp_path / "logs"
    logs.mkdir()
    with live_api(capped, logs) as api:
        yield api


def _start_upload(api: LiveApi, key: str) -> socket.socket:
    """A submission whose body starts and then pauses (a slow client): the server holds it open."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="target"; filename="slow.mp4"\r\n'
        "Content-Type: video/mp4\r\n\r\n"
    ).encode()
    request = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {api.host}:{api.port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {len(head) + 1_000_000}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((api.host, api.port))
    sock.settimeout(30)
    sock.sendall(request + head + bytes(1000))
    return sock


def _answer(sock: socket.socket) -> bytes:
    response = b""
    while b"\r\n\r\n" not in response or not response.rstrip().endswith(b"}"):
        data = sock.recv(65536)
        if not data:
            break
        response += data
    return response


def _probe_upload(api: LiveApi, key: str) -> int:
    """A submission that takes an upload place and gives it back at once (not multipart): 422, or 429 if full."""
    return httpx.post(f"{api.url}/v1/jobs", headers=bearer(key), content=b"x", timeout=30).status_code


class _Trickle(threading.Thread):
    """Keeps a slow upload alive with a byte now and then, until stopped (then it stalls)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock, self.stop = sock, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            try:
                self.sock.sendall(b"\0")
            except OSError:
                return


def _answered(sock: socket.socket) -> bool:
    return bool(io_select.select([sock], [], [], 0)[0])


def test_a_key_uploads_at_most_its_cap_at_once_and_a_stalled_upload_is_ended(server: LiveApi, capped: Settings) -> None:
    key, other = make_key(capped), make_key(capped)
    slow: list[socket.socket] = []
    trickles: list[_Trickle] = []

    def both_holding() -> bool:
        # A probe may reach the server before a slow upload does and take its place for a moment; that upload is
        # answered 429 at once. Start it again until both hold a place and a probe is the one refused.
        for i, sock in enumerate(slow):
            if _answered(sock):
                trickles[i].stop.set()
                sock.close()
                slow[i] = _start_upload(server, key)
                trickles[i] = _Trickle(slow[i])
                trickles[i].start()
        return _probe_upload(server, key) == 429 and not any(_answered(sock) for sock in slow)

    for _ in range(2):
        slow.append(_start_upload(server, key))
        trickles.append(_Trickle(slow[-1]))
        trickles[-1].start()
    try:
        wait_for(both_holding, timeout=30, what="both slow uploads holding a place")
        third = httpx.post(f"{server.url}/v1/jobs", headers=bearer(key), content=b"x", timeout=30)
        assert third.status_code == 429 and third.json()["error"]["code"] == "too_many_uploads"
        assert _probe_upload(server, other) == 422, "another key is not held back by this one's uploads"
        # Now they send nothing more: each is ended by the read timeout, with its code.
        for trickle in trickles:
            trickle.stop.set()
            trickle.join()
        for sock in slow:
            response = _answer(sock)
            assert response.startswith(b"HTTP/1.1 408"), response[:300]
            assert b'"upload_timeout"' in response
    finally:
        for trickle in trickles:
            trickle.stop.set()
        for sock in slow:
            sock.close()
    wait_for(lambda: _probe_upload(server, key) == 422, timeout=30, what="the places given back")
    with session_scope(capped.database_url) as s:
        assert not s.scalar(select(func.count()).select_from(Job).where(Job.target_name == "slow.mp4"))


def _queued_job(api: LiveApi, key: str, clip: Path) -> str:
    response = httpx.post(
        f"{api.url}/v1/jobs",
        headers=bearer(key),
        files={"target": ("clip.mp4", clip.read_bytes(), "video/mp4")},
        data={"options": PASSTHROUGH},
        timeout=60,
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_a_key_holds_at_most_its_cap_of_event_streams_and_a_revoked_keys_stream_ends(
    server: LiveApi, capped: Settings, clip_short: Path
) -> None:
    key = make_key(capped)
    job_id = _queued_job(server, key, clip_short)  # no worker runs: the job stays queued, its stream stays open
    url = f"{server.url}/v1/jobs/{job_id}/events/stream"
    with httpx.Client(headers=bearer(key), timeout=httpx.Timeout(30, read=30)) as client, ExitStack() as streams:
        first, second = (streams.enter_context(client.stream("GET", url)) for _ in range(2))
        lines, held = first.iter_lines(), second.iter_lines()  # (an iterator dropped would close its stream)
        assert next(lines) == "retry: 2000" and next(held) == "retry: 2000"
        refused = httpx.get(url, headers=bearer(key), timeout=30)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_streams"

        with session_scope(capped.database_url) as s:
            principal = authenticate(s, key)
            assert principal is not None
            revoke_key(s, principal.key_id)
        rest = list(lines)  # the stream ends by itself once the key is found revoked
        assert "event: error" in rest and any('"unauthorized"' in line for line in rest), rest[-5:]
    assert httpx.get(url, headers=bearer(key), timeout=30).status_code == 401


@pytest.fixture
def client(settings: Settings, api_key: str) -> Iterator[TestClient]:
    with TestClient(create_app(settings), headers=bearer(api_key)) as client:
        yield client


def _submit(client: TestClient, clip: Path, **data: str) -> httpx.Response:
    return client.post(
        "/v1/jobs",
        files={"target": ("clip.mp4", clip.read_bytes(), "video/mp4")},
        data={"options": PASSTHROUGH, **data},
    )


def test_the_farm_wide_urgent_band_needs_an_admin_key(settings: Settings, clip_short: Path) -> None:
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as tenant:
        refused = _submit(tenant, clip_short, priority="10")
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    with TestClient(create_app(settings), headers=bearer(make_key(settings, admin=True))) as admin:
        accepted = _submit(admin, clip_short, priority="10")
        assert accepted.status_code == 202 and accepted.json()["priority"] == 10


def test_a_tenant_over_its_waiting_jobs_quota_gets_429_and_nothing_is_stored(
    settings: Settings, clip_short: Path
) -> None:
    quota = settings.model_copy(update={"max_waiting_jobs_per_tenant": 1})
    key = make_key(quota, max_running_jobs=1)
    with TestClient(create_app(quota), headers=bearer(key)) as client:
        running, waiting = _submit(client, clip_short), _submit(client, clip_short)
        assert [running.json()["status"], waiting.json()["status"]] == ["queued", "waiting"]
        stored = sorted(Path(quota.storage_url.removeprefix("file://")).rglob("*"))
        over = _submit(client, clip_short)
        assert over.status_code == 429 and over.json()["error"]["code"] == "too_many_waiting_jobs", over.text
        assert sorted(Path(quota.storage_url.removeprefix("file://")).rglob("*")) == stored


def test_a_tenant_over_its_storage_quota_gets_429_until_it_frees_some(settings: Settings, clip_short: Path) -> None:
    quota = settings.model_copy(update={"max_stored_bytes_per_tenant": clip_short.stat().st_size * 3 // 2})
    with TestClient(create_app(quota), headers=bearer(make_key(quota))) as client:
        first = _submit(client, clip_short)
        assert first.status_code == 202
        over = _submit(client, clip_short)
        assert over.status_code == 429 and over.json()["error"]["code"] == "storage_quota_exceeded", over.text
        assert client.post(f"/v1/jobs/{first.json()['id']}/cancel").status_code == 200  # its files are deleted
        assert _submit(client, clip_short).status_code == 202


def test_chunks_come_a_page_at_a_time(client: TestClient, settings: Settings, clip_short: Path) -> None:
    job_id = _submit(client, clip_short).json()["id"]
    with session_scope(settings.database_url) as s:
        token = jobs.begin_plan(s, job_id, 60)
        assert token is not None
        jobs.record_plan(s, job_id, token, [ChunkPlan(i, i * 10, i * 10 + 10, i / 3) for i in range(5)], {}, "any")
    pages, after = [], -1
    while after is not None:
        page = client.get(f"/v1/jobs/{job_id}/chunks", params={"after": after, "limit": 2}).json()
        pages.append([c["index"] for c in page["chunks"]])
        after = page["next_after"]
    assert pages == [[0, 1], [2, 3], [4]]
    assert client.get(f"/v1/jobs/{job_id}/chunks", params={"limit": 100000}).status_code == 422


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ("[" * 5000 + "]" * 5000, "options_invalid"),  # deeply nested: refused before the parser recurses
        (json.dumps({"face": {"mask_padding": [0, 0, 10**12, 0]}}), "options_invalid"),
        (json.dumps({"processors": ["face_blur"] * 100}), "options_invalid"),
    ],
    ids=["deeply-nested", "huge-mask-padding", "processors-repeated"],
)
def test_odd_options_answer_422_with_a_code(client: TestClient, clip_short: Path, options: str, code: str) -> None:
    response = _submit(client, clip_short, options=options)
    assert response.status_code == 422 and response.json()["error"]["code"] == code, response.text


def test_a_refusal_names_no_server_path(client: TestClient) -> None:
    response = client.post("/v1/jobs", files={"target": ("clip.mp4", b"\x00\x00\x00\x18ftypmp42" + bytes(500))})
    error = response.json()["error"]
    assert response.status_code == 422 and error["code"] == "media_unreadable"
    assert "/" not in error["message"], error
