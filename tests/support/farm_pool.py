"""Farm processes started once and used by many tests: a worker or beat outlives the test that started it and is
handed to the next test of its module that asks for the same one.

A test still writes ``farm.worker("w1")`` and ``farm.beat()`` (``tests.support.farm.Farm``'s interface). The pool
reuses a process only when everything it was started with is the same (the settings it runs under, its arguments,
its extra environment, its working directory) and it is still alive; otherwise it stops the old one and starts a
new one. A test's first ``worker``/``beat`` call stops every pooled process other than the one asked for, so that
from then on only the processes the test asked for run, as on a farm of its own (pausing them instead would not
do: a stopped worker's pending BRPOP still takes a message off the broker). So a module marked ``shared_farm``
holds only tests that start their processes before they submit work. ``kill`` is a real SIGKILL: the next test
that asks for that worker gets a fresh one. ``log`` returns what a process wrote since the current test took it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from shared.settings import Settings
from tests.support.farm import Farm, settings_env


@dataclass
class _Pooled:
    spec: tuple[object, ...]
    proc: subprocess.Popen[bytes]


class FarmPool:
    """The processes kept between the tests of one scope (a module), by the key a test names them with."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.pooled: dict[str, _Pooled] = {}

    def take(
        self, key: str, spec: tuple[object, ...], start: Callable[[], subprocess.Popen[bytes]]
    ) -> subprocess.Popen[bytes]:
        """The pooled process ``key`` when it was started as ``spec`` and still runs, else a new one."""
        held = self.pooled.get(key)
        if held is not None and held.spec == spec and held.proc.poll() is None:
            return held.proc
        if held is not None:
            self._end(self.pooled.pop(key))
        proc = start()
        self.pooled[key] = _Pooled(spec, proc)
        return proc

    def keep_only(self, key: str) -> None:
        """Stop every pooled process but ``key``."""
        for other in [k for k in self.pooled if k != key]:
            self._end(self.pooled.pop(other))

    def forget(self, key: str) -> None:
        self.pooled.pop(key, None)

    def stop(self) -> None:
        for key in list(self.pooled):
            self._end(self.pooled.pop(key))

    @staticmethod
    def _end(held: _Pooled) -> None:
        proc = held.proc
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


class PooledFarm(Farm):
    """``Farm`` for one test over a ``FarmPool``: the processes it asks for come from the pool and stay in it when
    the test ends (the pool stops them at the end of its scope, or when a later test asks for others)."""

    def __init__(self, settings: Settings, pool: FarmPool, cwd: Path | None = None) -> None:
        super().__init__(settings, pool.logs, cwd)
        self.pool = pool
        self._offsets: dict[str, int] = {}

    def _spawn(self, key: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        if not self._offsets:  # the test's first process: none but those it asks for from now on
            self.pool.keep_only(key)
        spec = (tuple(args), tuple(sorted(settings_env(self.settings).items())), tuple(sorted((env or {}).items())))
        spec += (str(self.cwd),)
        log = self.logs / f"{key}.log"
        offset = log.stat().st_size if log.exists() else 0
        proc = self.pool.take(key, spec, lambda: Farm._spawn(self, key, args, env))
        self._offsets.setdefault(key, offset)
        self.procs[key] = proc
        return proc

    def kill(self, key: str) -> None:
        super().kill(key)
        self.pool.forget(key)

    def stop(self) -> None:
        """Leave the test's processes to the pool."""
        self.procs.clear()

    def log(self, key: str) -> str:
        with (self.logs / f"{key}.log").open("rb") as file:
            file.seek(self._offsets.get(key, 0))
            return file.read().decode(errors="replace")
