"""Local stand-ins for the farm's outside services, started by tests on loopback: free ports, an S3 server."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.support.farm import wait_for


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(url: str, auth: tuple[str, str] | None = None) -> int | None:
    """The HTTP status of a GET of ``url``, or ``None`` while nothing listens."""
    try:
        return httpx.get(url, auth=auth, timeout=5).status_code
    except httpx.TransportError:
        return None


@contextmanager
def s3_server(log: Path) -> Iterator[str]:
    """moto's S3-compatible server in server mode, in its own process on a loopback port; yields its URL."""
    port = free_port()
    code = "import sys; from moto.server import main; main(sys.argv[1:])"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: answers(f"{url}/moto-api/"), timeout=60, what="the S3 server")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
