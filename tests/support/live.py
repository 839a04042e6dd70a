"""The API as a real server: ``swapfarm api`` (uvicorn) in its own process, on a free port of the loopback."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from shared.settings import Settings
from tests.support.farm import settings_env


@dataclass(frozen=True)
class LiveApi:
    url: str
    host: str
    port: int
    pid: int
    log: Path

    def memory(self) -> dict[str, int]:
        """The server's resident memory now and at its peak (``VmRSS``, ``VmHWM``), in bytes, from /proc."""
        found: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in {"VmRSS", "VmHWM"}:
                found[key] = int(value.split()[0]) * 1024
        return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_api(settings: Settings, logs: Path, env: dict[str, str] | None = None) -> Iterator[LiveApi]:
    port = free_port()
    log = logs / f"api-{port}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "api", "--host", "127.0.0.1", "--port", str(port)],
            env={**settings_env(settings), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"the API exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the API did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield LiveApi(url=url, host="127.0.0.1", port=port, pid=proc.pid, log=log)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
