"""A worker's presence in the ``workers`` table: host, accelerator family and device at start, then a heartbeat
every ``heartbeat_seconds`` while it runs (idle or busy), and the time it stopped. The jobs console's workers page
reads it beside the chunk rows (what each worker renders and how fast).

It runs in the worker's main process, which must not touch CUDA (see ``workers.engines.family``): the device is
named from what the driver publishes under ``/proc`` and ``/sys``, and the database is reached through its own
engine without a pool, so no connection is ever shared with the pool's forked children.
"""

from __future__ import annotations

import logging
import os
import platform
import socket
import threading
from pathlib import Path
from typing import Any

from celery import Celery, signals
from sqlalchemy import create_engine, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from shared.models import WorkerPresence, utcnow
from shared.settings import Settings
from shared.worker_health import fresh_start, join_tags
from workers.engines.family import detect_family
from workers.selftest import self_test

logger = logging.getLogger(__name__)


def _first_line_with(path: Path, key: str) -> str | None:
    try:
        for line in path.read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip().lower() == key:
                return value.strip()
    except OSError:
        return None
    return None


def _visible(devices: list[str]) -> list[str]:
    chosen = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("HIP_VISIBLE_DEVICES")
    if not chosen:
        return devices
    picked = [devices[int(i)] for i in chosen.split(",") if i.strip().isdigit() and int(i) < len(devices)]
    return picked or devices


def device_name(family: str, root: Path = Path("/")) -> str:
    """What the worker computes on, as the driver names it (no CUDA or ROCm call)."""
    if family == "cuda":
        cards = sorted((root / "proc/driver/nvidia/gpus").glob("*/information"))
        names = [n for n in (_first_line_with(card, "model") for card in cards) if n]
        return ", ".join(_visible(names)) or "NVIDIA GPU"
    if family == "rocm":
        found = sorted((root / "sys/class/drm").glob("card[0-9]*/device/product_name"))
        names = [p.read_text(errors="replace").strip() for p in found if p.is_file()]
        return ", ".join(_visible([n for n in names if n])) or "AMD GPU"
    if family == "mps":
        return "Apple GPU (Metal)"
    model = _first_line_with(root / "proc/cpuinfo", "model name") or platform.processor() or platform.machine()
    return f"{model} ({os.cpu_count()} threads)"


class Presence:
    """Announces one worker and keeps its heartbeat until :meth:`stop`."""

    def __init__(self, settings: Settings, name: str, queues: str) -> None:
        self.settings, self.name, self.queues = settings, name, queues
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._engine: Engine | None = None

    def _session(self) -> Session:
        if self._engine is None:
            self._engine = create_engine(self.settings.database_url, poolclass=NullPool)
        return Session(self._engine)

    def announce(self) -> None:
        """Write the worker's row (its tags among it), then run the self-test (``workers.selftest``): passed, the
        worker starts with a clean slate (a quarantined one is released); failed, a quarantined one stays so."""
        family = detect_family(self.settings)
        now = utcnow()
        with self._session() as session, session.begin():
            row = session.get(WorkerPresence, self.name) or WorkerPresence(name=self.name)
            row.hostname, row.family, row.device = socket.gethostname(), family, device_name(family)[:255]
            row.queues, row.started_at, row.last_seen_at, row.stopped_at = self.queues, now, now, None
            row.tags = join_tags(self.settings.worker_tags)
            session.add(row)
            held = row.quarantined_at is not None
        failed = self_test(self.settings.work_dir.expanduser().resolve())
        if failed is not None:
            state = "still quarantined" if held else "its failures keep counting"
            logger.error("worker %s: %s: its self-test failed: %s", self.name, state, failed)
            return
        with self._session() as session, session.begin():
            released = fresh_start(session, self.name)
        if released:
            logger.warning("worker %s: released from quarantine: restarted with a healthy self-test", self.name)

    def beat(self) -> None:
        with self._session() as session, session.begin():
            session.execute(
                update(WorkerPresence).where(WorkerPresence.name == self.name).values(last_seen_at=utcnow())
            )

    def _run(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_seconds):
            try:
                self.beat()
            except SQLAlchemyError as exc:  # the database is away: the page will show the worker offline
                logger.warning("worker %s: presence heartbeat failed: %s", self.name, type(exc).__name__)

    def start(self) -> None:
        try:
            self.announce()
        except SQLAlchemyError as exc:
            logger.warning("worker %s: could not announce itself: %s", self.name, type(exc).__name__)
        self._thread = threading.Thread(target=self._run, name="presence", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            with self._session() as session, session.begin():
                session.execute(
                    update(WorkerPresence).where(WorkerPresence.name == self.name).values(stopped_at=utcnow())
                )
        except SQLAlchemyError:
            pass
        if self._engine is not None:
            self._engine.dispose()


def register(app: Celery, settings: Settings) -> None:
    """Start the presence of the worker that ``app`` runs in when it is ready; stop it when it shuts down."""
    uid = f"swapfarm-{id(app)}-presence"
    holder: list[Presence] = []

    def ready(sender: Any = None, **_: Any) -> None:
        name = str(getattr(sender, "hostname", "") or socket.gethostname())
        consumer = getattr(sender, "task_consumer", None)
        queues = ",".join(sorted(q.name for q in getattr(consumer, "queues", []) or []))
        presence = Presence(settings, name, queues)
        presence.start()
        holder.append(presence)

    def shutdown(**_: Any) -> None:
        for presence in holder:
            presence.stop()

    signals.worker_ready.connect(ready, weak=False, dispatch_uid=f"{uid}-ready")
    signals.worker_shutdown.connect(shutdown, weak=False, dispatch_uid=f"{uid}-shutdown")
