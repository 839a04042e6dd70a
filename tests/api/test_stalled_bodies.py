"""Every body the API reads is bounded in time, against a real uvicorn process: a request that declares a body and
stalls is answered 408 with a stable code within seconds (short timeouts here), and frees what it held; a
connection that never finishes its headers is closed the same way."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.settings import Settings
from tests.support.live import LiveApi, live_api
from tests.support.tenants import bearer, make_key

JOB_ID = "0" * 32
TIMEOUT = 1.0  # every bound in these settings: a stalled request is answered within seconds


@pytest.fixture(scope="module")
def bounded(database_url: str, broker_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("stalled")
    return Settings(
        environment="test", database_url=database_url, broker_url=broker_url,
        storage_url=f"file://{root / 'storage'}", work_dir=root / "work",
        body_timeout_seconds=TIMEOUT, upload_read_timeout_seconds=TIMEOUT, header_timeout_seconds=TIMEOUT,
        keep_alive_seconds=int(TIMEOUT * 2), max_uploads_per_key=1,  # longer than the head bound: which one acts
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(bounded: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApi]:
    with live_api(bounded, tmp_path_factory.mktemp("logs")) as api:
        yield api


@pytest.fixture(scope="module")
def key(bounded: Settings) -> str:
    return make_key(bounded)


def _open(api: LiveApi, head: str, sent: bytes = b"") -> socket.socket:
    sock = socket.create_connection((api.host, api.port))
    sock.settimeout(TIMEOUT * 10)  # the server must answer well before this; a recv past it fails the test
    sock.sendall(head.encode() + sent)
    return sock


def _request(api: LiveApi, path: str, key: str, content_type: str, declared: int) -> str:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {api.host}:{api.port}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {declared}\r\n\r\n"
    )


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection.

    A byte this client sent after the server closed is answered by the server's kernel with a reset, which can
    arrive after the answer and its end: the answer received before it is the server's whole answer."""
    response = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            if not response:
                raise
            return response
        if not data:
            return response
        response += data


FORM = "application/x-www-form-urlencoded"
# (path, content type, the start of a body that never ends): every reader of a small body
SMALL_READERS = [
    ("/ui/sign-in", FORM, b"key=sf_"),
    ("/ui/sign-out", FORM, b"csrf_token="),
    (f"/ui/jobs/{JOB_ID}/cancel", FORM, b"csrf_token="),
    (f"/ui/jobs/{JOB_ID}/retry", FORM, b"csrf_token="),
    ("/v1/jobs", "application/json", b'{"target": {"url": "s3://media/'),
]


@pytest.mark.parametrize(("path", "content_type", "start"), SMALL_READERS)
def test_a_small_body_that_stalls_is_answered_408(
    server: LiveApi, key: str, path: str, content_type: str, start: bytes
) -> None:
    sock = _open(server, _request(server, path, key, content_type, 1000), start)
    with sock:
        response = _answer(sock)
    assert response.startswith(b"HTTP/1.1 408"), response[:300]
    assert b'"body_timeout"' in response and response.count(b"HTTP/1.1 ") == 1, "one answer, then the connection ends"


@pytest.mark.parametrize(("path", "content_type", "start"), SMALL_READERS)
def test_a_small_body_sent_a_byte_at_a_time_is_ended_at_its_deadline(
    server: LiveApi, key: str, path: str, content_type: str, start: bytes
) -> None:
    """Each byte comes well within the wait for one, but the whole body would take far longer than its bound."""
    sock = _open(server, _request(server, path, key, content_type, 1000), start)
    with sock:
        ends = time.monotonic() + TIMEOUT * 10
        while time.monotonic() < ends:
            try:
                sock.sendall(b"x")
            except OSError:
                break  # the server has answered and closed
            if _readable(sock):
                break
            time.sleep(TIMEOUT / 8)
        response = _answer(sock)
    assert response.startswith(b"HTTP/1.1 408"), response[:300]
    assert b'"body_timeout"' in response and response.count(b"HTTP/1.1 ") == 1, "one answer, then the connection ends"


def _readable(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def test_a_stalled_json_submission_gives_its_upload_place_back(server: LiveApi, bounded: Settings) -> None:
    key = make_key(bounded)  # a cap of 1 upload at once for this key
    stalled = _open(server, _request(server, "/v1/jobs", key, "application/json", 1000), b"{")
    with stalled:
        # While it stalls, it holds the key's one upload place.
        deadline = time.monotonic() + TIMEOUT * 5
        while True:
            probe = httpx.post(f"{server.url}/v1/jobs", headers=bearer(key), json={"target": {"url": "s3://m/a"}})
            if probe.status_code == 429 or time.monotonic() > deadline:
                break
        assert probe.status_code == 429 and probe.json()["error"]["code"] == "too_many_uploads"
        assert _answer(stalled).startswith(b"HTTP/1.1 408")
    after = httpx.post(f"{server.url}/v1/jobs", headers=bearer(key), json={"target": {"url": "s3://m/a"}})
    assert after.status_code == 422 and after.json()["error"]["code"] == "input_url_forbidden", after.text


def test_a_stalled_multipart_upload_is_answered_408_and_gives_its_place_back(
    server: LiveApi, bounded: Settings
) -> None:
    key = make_key(bounded)
    boundary = "stall"
    start = f'--{boundary}\r\nContent-Disposition: form-data; name="target"; filename="a.mp4"\r\n\r\n'.encode()
    sock = _open(server, _request(server, "/v1/jobs", key, f"multipart/form-data; boundary={boundary}", 10**6), start)
    with sock:
        response = _answer(sock)
    assert response.startswith(b"HTTP/1.1 408") and b'"upload_timeout"' in response, response[:300]
    after = httpx.post(f"{server.url}/v1/jobs", headers=bearer(key), json={"target": {"url": "s3://m/a"}})
    assert after.status_code == 422, after.text


@pytest.mark.parametrize(
    "sent",
    [
        b"",  # a connection that sends nothing
        b"POST /ui/sign-in HTTP/1.1\r\nHost: x\r\n",  # a head that never ends
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\n",  # the next request's head
    ],
)
def test_a_connection_that_does_not_finish_its_headers_is_closed(server: LiveApi, sent: bytes) -> None:
    sock = _open(server, "", sent)
    with sock:
        response = _answer(sock)
    assert b"HTTP/1.1 408" in response and b'"header_timeout"' in response, response[:500]
    if sent.startswith(b"GET"):
        assert response.startswith(b"HTTP/1.1 200"), "the whole request before it was answered"


def test_headers_sent_a_byte_at_a_time_are_ended_at_the_deadline(server: LiveApi) -> None:
    sock = _open(server, "")
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200
    with sock:
        for i in range(len(head)):
            try:
                sock.sendall(head[i : i + 1])
            except OSError:
                break
            if _readable(sock):
                break
            time.sleep(TIMEOUT / 8)
        response = _answer(sock)
    assert response.startswith(b"HTTP/1.1 408") and b'"header_timeout"' in response, response[:300]


def test_an_idle_kept_alive_connection_is_closed_without_another_answer(server: LiveApi) -> None:
    sock = _open(server, "", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    with sock:
        response = _answer(sock)  # until the keep-alive bound closes it
    assert response.startswith(b"HTTP/1.1 200") and response.count(b"HTTP/1.1 ") == 1, response[:500]


def test_a_live_client_is_not_cut_off(server: LiveApi, key: str, clip_short: Path) -> None:
    """Bounds on stalled requests leave a request that arrives at once, and a kept-alive connection, alone."""
    with httpx.Client(base_url=server.url, headers=bearer(key), timeout=30) as client:
        assert client.get("/healthz").status_code == 200
        assert client.post("/ui/sign-in", data={"key": "nope", "csrf_token": "x"}).status_code == 401
        assert client.get("/healthz").status_code == 200  # the same kept-alive connection
