"""A per-test wall and CPU profile of the suite, written as JSON when ``SWAPFARM_TEST_PROFILE`` names a file.

Each test's record holds its wall time (set-up, call and tear-down together) and the CPU seconds (user + system)
of the pytest process and of its reaped children over that span, so that the time the processes a test starts
(workers, ffmpeg, the browser) spend is counted with it. Children still alive at a test's end (a module's farm)
are counted with the test that reaps them; the pool processes of a worker killed with SIGKILL are reaped by init,
so their CPU is not counted. The file is rewritten after every test. Loaded by ``tests/conftest.py``; off unless
the variable is set.

Under pytest-xdist each worker process writes its own file beside it (``profile.gw0.json`` …), and the controlling
process merges them into the named file at the end: the tests of every worker, the controller's wall time, and the
CPU of the workers summed."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_ENV = "SWAPFARM_TEST_PROFILE"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


class _Profile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.tests: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.self0 = _cpu(resource.RUSAGE_SELF)
        self.children0 = _cpu(resource.RUSAGE_CHILDREN)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        wall0 = time.monotonic()
        self0 = _cpu(resource.RUSAGE_SELF)
        children0 = _cpu(resource.RUSAGE_CHILDREN)
        yield
        self.tests.append(
            {
                "nodeid": item.nodeid,
                "wall_s": round(time.monotonic() - wall0, 3),
                "cpu_self_s": round(_cpu(resource.RUSAGE_SELF) - self0, 3),
                "cpu_children_s": round(_cpu(resource.RUSAGE_CHILDREN) - children0, 3),
            }
        )
        self._write()  # after every test: a run stopped half-way still leaves its profile so far

    def pytest_sessionfinish(self) -> None:
        self._write()

    def _write(self) -> None:
        total: dict[str, Any] = {
            "wall_s": round(time.monotonic() - self.started, 3),
            "cpu_self_s": round(_cpu(resource.RUSAGE_SELF) - self.self0, 3),
            "cpu_children_s": round(_cpu(resource.RUSAGE_CHILDREN) - self.children0, 3),
        }
        self.path.write_text(json.dumps({"total": total, "tests": self.tests}, indent=1))


class _Merge:
    """In the controlling process of an xdist run: merges the workers' files into the named one at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.monotonic()
        for stale in self._parts():
            stale.unlink()

    def _parts(self) -> list[Path]:
        return sorted(self.path.parent.glob(f"{self.path.stem}.gw*{self.path.suffix}"))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self) -> None:
        tests: list[dict[str, Any]] = []
        cpu = {"cpu_self_s": 0.0, "cpu_children_s": 0.0}
        for part in self._parts():
            data = json.loads(part.read_text())
            tests += [{**test, "worker": part.stem.rsplit(".", 1)[1]} for test in data["tests"]]
            for key in cpu:
                cpu[key] += data["total"][key]
        total = {"wall_s": round(time.monotonic() - self.started, 3), **{k: round(v, 3) for k, v in cpu.items()}}
        self.path.write_text(json.dumps({"total": total, "tests": tests}, indent=1))


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(_ENV)
    if not target:
        return
    path = Path(target)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is not None:
        config.pluginmanager.register(_Profile(path.with_name(f"{path.stem}.{worker}{path.suffix}")), _ENV)
    elif getattr(config.option, "numprocesses", None):
        config.pluginmanager.register(_Merge(path), _ENV)
    else:
        config.pluginmanager.register(_Profile(path), _ENV)
