"""The per-key caps hold across API processes (counted in Redis), and the places of an API process that died come
free after ``slot_ttl_seconds``: two real uvicorn processes on one database and one Redis."""

from __future__ import annotations

import os
import select
import signal
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from shared.settings import Settings
from tests.support.farm import wait_for
from tests.support.live import LiveApi, live_api
from tests.support.tenants import bearer, make_key

BOUNDARY = "replicas"


@pytest.fixture
def capped(settings: Settings) -> Settings:
    return settings.model_copy(
        update={"max_uploads_per_key": 2, "upload_read_timeout_seconds": 30.0, "slot_ttl_seconds": 3.0}
    )


@pytest.fixture
def replicas(capped: Settings, tmp_path: Path) -> Iterator[tuple[LiveApi, LiveApi]]:
    with ExitStack() as stack:
        first = stack.enter_context(live_api(capped, tmp_path))
        second = stack.enter_context(live_api(capped, tmp_path))
        yield first, second


def _slow_upload(api: LiveApi, key: str) -> socket.socket:
    """A multipart submission that has started and is still sending (well inside the read timeout)."""
    head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="target"; filename="slow.mp4"\r\n\r\n'.encode()
    request = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: {api.host}:{api.port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {len(head) + 10**6}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((api.host, api.port))
    sock.sendall(request + head + bytes(100))
    return sock


def _probe(api: LiveApi, key: str) -> httpx.Response:
    """A submission that takes a place and gives it back at once (a JSON body naming a refused URL): 422, or 429
    when the key's places are all taken."""
    return httpx.post(f"{api.url}/v1/jobs", headers=bearer(key), json={"target": {"url": "s3://m/a.mp4"}}, timeout=30)


def _answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def _holding(apis: list[LiveApi], uploads: list[socket.socket], key: str) -> bool:
    """Whether every slow upload holds a place and a probe is refused. A probe may take a place for a moment
    before an upload arrives, which is then answered 429 at once: that upload is started again."""
    for i, sock in enumerate(uploads):
        if _answered(sock):
            sock.close()
            uploads[i] = _slow_upload(apis[i], key)
    return _probe(apis[-1], key).status_code == 429 and not any(_answered(sock) for sock in uploads)


def test_the_upload_cap_holds_across_two_api_processes(replicas: tuple[LiveApi, LiveApi], capped: Settings) -> None:
    first, second = replicas
    key = make_key(capped)
    apis = [first, second]
    uploads = [_slow_upload(api, key) for api in apis]  # one place on each process: the cap is 2
    try:
        wait_for(lambda: _holding(apis, uploads, key), timeout=20, what="both places taken")
        for api in (first, second):
            refused = _probe(api, key)
            assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_uploads"
        assert _probe(second, make_key(capped)).status_code == 422, "another key has places of its own"
    finally:
        for sock in uploads:
            sock.close()
    wait_for(lambda: _probe(second, key).status_code == 422, timeout=20, what="the places given back")


def test_the_places_of_an_api_process_that_died_come_free(replicas: tuple[LiveApi, LiveApi], capped: Settings) -> None:
    first, second = replicas
    key = make_key(capped)
    apis = [first, first, second]  # both uploads on the first process; probes on the second
    uploads = [_slow_upload(first, key), _slow_upload(first, key)]
    try:
        wait_for(lambda: _holding(apis, uploads, key), timeout=20, what="both places taken on the first")
        os.killpg(first.pid, signal.SIGKILL)  # no request ends, nothing is given back: the places must expire
        wait_for(lambda: _probe(second, key).status_code == 422, timeout=20, what="the dead process's places free")
    finally:
        for sock in uploads:
            sock.close()


def test_the_console_form_takes_the_same_upload_places(replicas: tuple[LiveApi, LiveApi], capped: Settings) -> None:
    """The console's submit form reads an upload as ``POST /v1/jobs`` does, so it holds one of the key's places:
    with both taken on the API processes, the form is refused (429, the form shown again) rather than read."""
    first, second = replicas
    key = make_key(capped)
    apis = [first, second]
    uploads = [_slow_upload(api, key) for api in apis]
    try:
        wait_for(lambda: _holding(apis, uploads, key), timeout=20, what="both places taken")
        form = httpx.post(
            f"{second.url}/ui/jobs",
            headers=bearer(key),
            files={"target": ("clip.mp4", b"\0" * 1024, "video/mp4")},
            timeout=30,
        )
        assert form.status_code == 429, form.text[:300]
        assert "text/html" in form.headers["content-type"] and "upload" in form.text.lower()
    finally:
        for sock in uploads:
            sock.close()
    wait_for(lambda: _probe(second, key).status_code == 422, timeout=20, what="the places given back")
