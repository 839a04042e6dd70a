"""Keeping a lease alive while a long step runs."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from shared import jobs
from shared.db import session_scope

if TYPE_CHECKING:
    from workers.runtime import Runtime

logger = logging.getLogger(__name__)


class Heartbeat:
    """Calls ``beat`` every ``interval`` seconds on a thread; ``alive`` turns false once ``beat`` says so.

    ``beat`` returns whether the lease is still held. A beat that raises (a database blip) is logged and tried
    again at the next interval: the lease is longer than the interval, so one missed beat loses nothing.
    """

    def __init__(self, beat: Callable[[], bool], interval: float, name: str) -> None:
        self._beat_once, self._interval = beat, interval
        self._stop = threading.Event()
        self.alive = True
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{name}", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.alive = self._beat_once()
            except Exception:
                logger.warning("%s: heartbeat failed", self._thread.name, exc_info=True)
            if not self.alive:
                return

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def job_heartbeat(rt: Runtime, job_id: str, token: str) -> Heartbeat:
    """A heartbeat keeping the lease of a step that holds the whole job (plan, stitch) while it runs."""

    def beat() -> bool:
        with session_scope(rt.db) as session:
            return jobs.extend_job_lease(session, job_id, token, rt.settings.lease_seconds)

    return Heartbeat(beat, rt.settings.heartbeat_seconds, job_id)
