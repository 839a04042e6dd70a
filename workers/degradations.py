"""Degradations: what makes a job worse without failing it, made visible.

Nothing degrades silently. Whatever code notices a fallback — a GPU runtime missing its provider, torch without
MPS running on the CPU, a source image with several faces, frame times that could not be kept — calls
:func:`report`: a warning in the log, the metric ``swapfarm_degradations_total{code}``, and, for the job whose step
is running, a ``warning`` event in its log (``status``, the event stream), once per job and code.

Steps collect what their work reported (:func:`collecting`, a context variable, so deep code needs no handle on the
job) and write it with :func:`record` in their own transaction. A degradation of the whole process (``sticky``:
the device fell back, for every job to come) is also recorded on every later job this process works on.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.db import session_scope
from shared.events import warn

__all__ = ["DegradationCollector", "Notice", "collecting", "record", "report", "sticky"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notice:
    code: str  # stable: gpu_provider_missing, mps_unavailable, source_several_faces, vfr_timing_lost …
    message: str


_collected: ContextVar[list[Notice] | None] = ContextVar("swapfarm_degradations", default=None)
_sticky: dict[str, Notice] = {}
_counts: Counter[str] = Counter()
_lock = threading.Lock()


def report(code: str, message: str, *, sticky: bool = False) -> Notice:
    """Make a degradation visible: log it, count it, and hand it to the step collecting for its job.

    ``sticky``: the process itself is degraded (every later job it works on is told too).
    """
    notice = Notice(code, message)
    logger.warning("degraded (%s): %s", code, message)
    with _lock:
        _counts[code] += 1
        if sticky:
            _sticky[code] = notice
    found = _collected.get()
    if found is not None and notice not in found:
        found.append(notice)
    return notice


def sticky() -> list[Notice]:
    """The degradations of this process that concern every job it works on."""
    with _lock:
        return list(_sticky.values())


@contextmanager
def collecting() -> Iterator[list[Notice]]:
    """Within the block, :func:`report` (in this thread and tasks started with a copy of its context) adds to
    the yielded list; the process's sticky degradations are in it too."""
    found: list[Notice] = list(sticky())
    token = _collected.set(found)
    try:
        yield found
    finally:
        _collected.reset(token)


def record(database_url: str, job_id: str, notices: list[Notice]) -> None:
    """Write each notice as a ``warning`` event of the job (once per job and code), in one transaction."""
    if not notices:
        return
    with session_scope(database_url) as session:
        for notice in notices:
            warn(session, job_id, notice.code, notice.message)


class DegradationCollector(Collector):
    """``swapfarm_degradations_total{code}``: degradations this process reported, by code."""

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "swapfarm_degradations", "Degradations made visible (fallbacks, lost timing …), by code", labels=["code"]
        )
        with _lock:
            counts = dict(_counts)
        for code, count in sorted(counts.items()):
            family.add_metric([code], float(count))
        yield family
