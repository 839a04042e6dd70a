"""Real farm processes for integration tests: Celery workers and beat as subprocesses of ``swapfarm``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import SecretStr

from shared.settings import Settings


def settings_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPFARM_")}
    for key, value in settings.model_dump(mode="json").items():
        if value is None:
            continue
        env[f"SWAPFARM_{key.upper()}"] = value if isinstance(value, str) else _json(value)
    for key in type(settings).model_fields:  # model_dump masks secrets: pass their real values
        if isinstance(secret := getattr(settings, key), SecretStr):
            env[f"SWAPFARM_{key.upper()}"] = secret.get_secret_value()
    return env


def _json(value: object) -> str:
    import json

    return json.dumps(value)


class Farm:
    """Starts and stops worker and beat processes; every process leads its own process group."""

    def __init__(self, settings: Settings, logs: Path, cwd: Path | None = None, python: Path | None = None) -> None:
        """``cwd``: the working directory of every process (default: the test's), e.g. one no other process sees.
        ``python``: the interpreter that runs them (default: the test's), e.g. another virtual environment's."""
        self.settings, self.logs, self.cwd = settings, logs, cwd
        self.python = str(python) if python else sys.executable
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, key: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with (self.logs / f"{key}.log").open("ab") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                [self.python, "-m", "cli", *args],
                env={**settings_env(self.settings), **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.cwd,
            )
        self.procs[key] = proc
        return proc

    def worker(
        self,
        name: str,
        *,
        queues: str | None = None,
        env: dict[str, str] | None = None,
        hostname: str | None = None,
        tags: list[str] | None = None,
    ) -> str:
        """Start a worker logging to ``<name>.log``, named ``<name>@test`` unless ``hostname`` says otherwise,
        started with ``--tag`` for each of ``tags``."""
        hostname = hostname or f"{name}@test"
        args = ["worker", "--name", hostname, "--concurrency", "1"]
        for tag in tags or ():
            args += ["--tag", tag]
        if queues:
            args += ["--queues", queues]
        self._spawn(name, args, env)
        return hostname

    def beat(self) -> None:
        self._spawn("beat", ["beat"])

    def flower(self, port: int) -> None:
        self._spawn("flower", ["flower", "--host", "127.0.0.1", "--port", str(port)])

    def kill(self, key: str) -> None:
        """SIGKILL the whole process group: the worker's parent and its pool children, with no cleanup."""
        proc = self.procs.pop(key)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for key in list(self.procs):
            proc = self.procs.pop(key)
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()

    def log(self, key: str) -> str:
        return (self.logs / f"{key}.log").read_text(errors="replace")


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str, interval: float = 0.2) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
