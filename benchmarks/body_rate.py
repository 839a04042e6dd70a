"""Body rate: how fast uvicorn reads a large request body with the API's protocol (``api.server``, h11 with the
request-head deadline) and with httptools (uvicorn's default where installed, which has neither that deadline nor
a head-size bound), side by side in one run.

A bare ASGI app that drains the body runs under each (one uvicorn process each, on the loopback); each round POSTs
``--mib`` MiB to both, one after the other. Prints MB/s per round. A report, not a timed test.

    .venv/bin/python -m benchmarks.body_rate [--mib 256] [--rounds 3]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.support.live import free_port

APP = """
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(size).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
"""
PROTOCOLS = {"api.server (h11, bounded head)": "api.server:BoundedH11Protocol", "httptools": "httptools"}
BLOCK = b"x" * (1 << 20)


def _serve(folder: Path, http: str, port: int) -> subprocess.Popen[bytes]:
    code = (
        f"import sys; sys.path.insert(0, {str(folder)!r}); import uvicorn; "
        f"uvicorn.run('drain:app', host='127.0.0.1', port={port}, http={http!r}, log_level='warning')"
    )
    return subprocess.Popen([sys.executable, "-c", code])


def _wait_up(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.post(f"http://127.0.0.1:{port}/", content=b"", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit(f"no server on port {port}")


def _post(port: int, size: int) -> float:
    """MB/s of one POST of ``size`` bytes, from the request line to the answer."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        started = time.perf_counter()
        sock.sendall(f"POST / HTTP/1.1\r\nHost: bench\r\nContent-Length: {size}\r\n\r\n".encode())
        for _ in range(size // len(BLOCK)):
            sock.sendall(BLOCK)
        answer = b""
        while not answer.endswith(str(size).encode()):
            answer += sock.recv(4096)
        return size / (time.perf_counter() - started) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.mib * len(BLOCK)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "drain.py").write_text(APP)
        servers = {name: (free_port(), http) for name, http in PROTOCOLS.items()}
        procs = [_serve(folder, http, port) for port, http in servers.values()]
        try:
            for port, _ in servers.values():
                _wait_up(port)
            rates: dict[str, list[float]] = {name: [] for name in servers}
            for _ in range(args.rounds):
                for name, (port, _) in servers.items():
                    rates[name].append(_post(port, size))
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait()
    for name, measured in rates.items():
        print(f"{name:32} " + "  ".join(f"{rate:6.0f}" for rate in measured) + "  MB/s")


if __name__ == "__main__":
    main()
