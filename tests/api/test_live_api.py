"""The API as a real uvicorn process: racing idempotent submissions, and over-size uploads refused mid-stream
with the server's memory measured from /proc."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func
from sqlalchemy import select as sql_select

from shared.db import session_scope
from shared.models import Job
from shared.settings import Settings
from tests.support.live import LiveApi, live_api
from tests.support.tenants import bearer, make_key

MIB = 1 << 20
logger = logging.getLogger(__name__)


@pytest.fixture
def limited(settings: Settings) -> Settings:
    # Twenty uploads of one key race below: the cap on a key's uploads at once is not what is tested here.
    return settings.model_copy(update={"max_upload_bytes": 100 * MIB, "max_uploads_per_key": 20})


@pytest.fixture
def spool(tmp_path: Path) -> Path:
    """The API process's temporary folder, where uploads are spooled while they stream in."""
    path = tmp_path / "spool"
    path.mkdir()
    return path


@pytest.fixture
def server(limited: Settings, tmp_path: Path, spool: Path) -> Iterator[LiveApi]:
    logs = tmp_path / "logs"
    logs.mkdir()
    with live_api(limited, logs, env={"TMPDIR": str(spool)}) as api:
        yield api


def test_twenty_parallel_posts_with_one_idempotency_key_make_one_job(
    server: LiveApi, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    content = clip_short.read_bytes()
    barrier = threading.Barrier(20)
    answers: list[tuple[int, str]] = []

    def post() -> None:
        with httpx.Client(base_url=server.url, headers=bearer(key), timeout=120) as client:
            barrier.wait()
            response = client.post(
                "/v1/jobs",
                files={"target": ("clip.mp4", content, "video/mp4")},
                data={"options": '{"processors": ["passthrough"]}'},
                headers={"Idempotency-Key": "nightly-render-2026-11-29"},
            )
        answers.append((response.status_code, response.json().get("id", response.text)))

    threads = [threading.Thread(target=post) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [status for status, _ in answers] == [202] * 20, answers
    assert len({job_id for _, job_id in answers}) == 1
    with session_scope(settings.database_url) as s:
        count = s.scalar(
            sql_select(func.count()).select_from(Job).where(Job.idempotency_key == "nightly-render-2026-11-29")
        )
    assert count == 1
    stored = Path(settings.storage_url.removeprefix("file://")) / "jobs"
    assert [p.name for p in stored.iterdir()] == [answers[0][1]], "the losers' uploads are removed"


def _upload(api: LiveApi, key: str, total: int, *, chunked: bool) -> tuple[int, bytes]:
    """POST a multipart body whose target is ``total`` zero bytes, sent 1 MiB at a time, stopping as soon as the
    server answers. Returns the target bytes sent by then and the raw response."""
    boundary = "----swapfarm-test-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="target"; filename="huge.mp4"\r\n'
        "Content-Type: video/mp4\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(head) + total + len(tail)}"
    request = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {api.host}:{api.port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n{length}\r\n\r\n"
    ).encode()

    def frame(data: bytes) -> bytes:
        return f"{len(data):x}\r\n".encode() + data + b"\r\n" if chunked else data

    block = bytes(MIB)
    sent = 0
    with socket.create_connection((api.host, api.port)) as sock:
        sock.settimeout(5)
        sock.sendall(request + frame(head))
        try:
            while sent < total and not select.select([sock], [], [], 0)[0]:
                sock.sendall(frame(block))
                sent += len(block)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            pass  # the server stopped reading: its answer is waiting
        response = b""
        try:
            while b"\r\n\r\n" not in response or not response.rstrip().endswith(b"}"):
                data = sock.recv(65536)
                if not data:
                    break
                response += data
        except (ConnectionResetError, TimeoutError):
            pass
    return sent, response


def test_a_huge_upload_is_refused_mid_stream_and_the_servers_memory_stays_flat(
    server: LiveApi, settings: Settings, clip_short: Path, spool: Path
) -> None:
    key = make_key(settings)
    with httpx.Client(base_url=server.url, headers=bearer(key), timeout=60) as client:  # warm every code path
        assert client.get("/v1/jobs").status_code == 200
        small = client.post(
            "/v1/jobs",
            files={"target": ("clip.mp4", clip_short.read_bytes(), "video/mp4")},
            data={"options": '{"processors": ["passthrough"]}'},
        )
        assert small.status_code == 202
    before = server.memory()
    peak = [before["VmRSS"]]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server.memory()["VmRSS"])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.monotonic()
    try:
        sent, response = _upload(server, key, 1024 * MIB, chunked=True)
    finally:
        stop.set()
        sampler.join()
    seconds = time.monotonic() - started
    after = server.memory()
    assert response.startswith(b"HTTP/1.1 413"), response[:300]
    assert b'"upload_too_large"' in response
    assert 100 * MIB <= sent < 300 * MIB, f"refused after {sent / MIB:.0f} MiB of 1024"
    growth = peak[0] - before["VmRSS"]
    logger.info(  # the measurement, for the record (pytest -o log_cli=true shows it)
        f"1 GiB chunked upload refused after {sent / MIB:.0f} MiB in {seconds:.1f}s; API RSS "
        f"{before['VmRSS'] / MIB:.1f} MiB before, peak {peak[0] / MIB:.1f} MiB during (+{growth / MIB:.1f}), "
        f"{after['VmRSS'] / MIB:.1f} MiB after; VmHWM {before['VmHWM'] / MIB:.1f} -> {after['VmHWM'] / MIB:.1f} MiB"
    )
    assert growth < 32 * MIB, f"the API's memory grew by {growth / MIB:.1f} MiB"
    assert after["VmHWM"] - before["VmHWM"] < 32 * MIB

    # a declared length over the body limit is refused before the body is read at all
    sent, response = _upload(server, key, 1024 * MIB, chunked=False)
    assert response.startswith(b"HTTP/1.1 413") and b'"request_too_large"' in response, response[:300]
    assert sent < 64 * MIB
    with httpx.Client(base_url=server.url, headers=bearer(key)) as client:
        assert client.get("/v1/jobs").json()["jobs"][0]["id"] == small.json()["id"], "nothing else was made"
    assert list(spool.iterdir()) == [], "the spooled part of a refused upload is removed"
