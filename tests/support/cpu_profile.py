"""A per-test wall and CPU profile of the suite, written as JSON when ``SWAPFARM_TEST_PROFILE`` names a file.

Each test's record holds its wall time (set-up, call and tear-down together) and the CPU seconds (user + system)
of the pytest process and of its reaped children over that span, so that the time the processes a test starts
(workers, ffmpeg, the browser) spend is counted with it. Children still alive at a test's end (a module's farm)
are counted with the test that reaps them; the pool processes of a worker killed with SIGKILL are reaped by init,
so their CPU is not counted. The file is rewritten after every test. Loaded by ``tests/conftest.py``; off unless
the variable is set."""

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
        total = {
            "wall_s": round(time.monotonic() - self.started, 3),
            "cpu_self_s": round(_cpu(resource.RUSAGE_SELF) - self.self0, 3),
            "cpu_children_s": round(_cpu(resource.RUSAGE_CHILDREN) - self.children0, 3),
        }
        self.path.write_text(json.dumps({"total": total, "tests": self.tests}, indent=1))


def pytest_configure(config: pytest.Config) -> None:
    target = os.environ.get(_ENV)
    if target:
        config.pluginmanager.register(_Profile(Path(target)), "swapfarm-cpu-profile")
