"""The workers page's rows: who is in the farm, on what device, doing what, how fast, last seen when.

Two sources, joined by the worker's name (Celery's node name, ``cpu-4121@gpu-7``):

* the ``workers`` table, where each worker process writes its host, family and device at start and its
  heartbeat every ``heartbeat_seconds`` while it runs, busy or idle (``workers.presence``);
* the chunk rows: the chunk a worker renders now, and its recent rate (frames of the chunks it finished in the
  last ten minutes over their render time) — measured on real work, not reported by the worker.

A worker whose heartbeat is older than three intervals shows as offline (it may have been killed).

What a tenant sees is less than an admin (:func:`_as_seen_by`): its own chunks only (a worker rendering another
tenant's shows as busy, nothing more), and no host names or devices — a worker is ``worker 3`` to it, since the
Celery node name carries the host.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared.models import Chunk, Job, WorkerPresence, utcnow
from shared.states import ChunkStatus
from shared.tenants import Principal

RECENT = timedelta(minutes=10)
SHOWN_FOR = timedelta(days=1)  # workers not seen for longer drop off the page


@dataclass(frozen=True)
class Current:
    job_id: str
    chunk_index: int
    frames_done: int
    frames: int


@dataclass(frozen=True)
class WorkerRow:
    name: str
    hostname: str
    family: str
    device: str
    state: str  # online, offline, stopped
    current: Current | None
    busy: bool  # rendering a chunk (shown as such when the chunk is not the viewer's)
    fps: float | None
    last_seen: datetime | None
    tags: str = ""  # comma-joined
    quarantine: str | None = None  # why it takes no work until released (``shared.worker_health``), else None


def worker_rows(session: Session, viewer: Principal, heartbeat_seconds: float) -> list[WorkerRow]:
    now = utcnow()
    present = {
        w.name: w
        for w in session.scalars(select(WorkerPresence).where(WorkerPresence.last_seen_at > now - SHOWN_FOR)).all()
    }
    running = session.execute(
        select(Chunk.worker, Chunk.job_id, Job.tenant_id, Chunk.index, Chunk.frames_done, Chunk.frame_start,
               Chunk.frame_end, Chunk.started_at)
        .join(Job, Job.id == Chunk.job_id)
        .where(Chunk.status == ChunkStatus.RUNNING, Chunk.worker.is_not(None))
    ).all()  # fmt: skip
    rates = session.execute(
        select(
            Chunk.worker,
            func.sum(Chunk.frame_end - Chunk.frame_start),
            func.sum(Chunk.render_seconds),
            func.max(Chunk.finished_at),
        )
        .where(Chunk.status == ChunkStatus.DONE, Chunk.finished_at > now - RECENT, Chunk.render_seconds > 0)
        .group_by(Chunk.worker)
    ).all()
    fps = {str(name): round(float(frames) / float(seconds), 1) for name, frames, seconds, _ in rates if seconds}
    finished = {str(name): at for name, _, _, at in rates}
    current: dict[str, Current] = {}
    owners: dict[str, str | None] = {}
    started: dict[str, datetime] = {}
    for worker, job_id, tenant_id, index, done, start, end, at in running:
        name = str(worker)
        current[name], owners[name] = Current(job_id, index, done, end - start), tenant_id
        if at is not None:
            started[name] = at
    rows = []
    for name in sorted(set(present) | set(current) | set(fps)):
        presence = present.get(name)
        seen = [t for t in (presence.last_seen_at if presence else None, started.get(name), finished.get(name)) if t]
        last_seen = max(seen) if seen else None
        if presence is not None and presence.stopped_at is not None and name not in current:
            state = "stopped"
        elif last_seen is not None and now - last_seen <= timedelta(seconds=3 * heartbeat_seconds):
            state = "online"
        else:
            state = "offline"
        if name in current and presence is None:
            state = "online"  # rendering now, from before the worker announced itself
        rows.append(
            WorkerRow(
                name=name,
                hostname=presence.hostname if presence else name.partition("@")[2],
                family=presence.family if presence else "",
                device=presence.device if presence else "",
                state=state,
                current=current.get(name),
                busy=name in current,
                fps=fps.get(name),
                last_seen=last_seen,
                tags=presence.tags if presence else "",
                quarantine=(presence.quarantine_reason or "quarantined")
                if presence is not None and presence.quarantined_at is not None
                else None,
            )
        )
    return _as_seen_by(viewer, rows, owners)


def _as_seen_by(viewer: Principal, rows: list[WorkerRow], owners: dict[str, str | None]) -> list[WorkerRow]:
    """An admin sees every row whole; a tenant sees its own chunks only, and no host names or devices."""
    if viewer.admin:
        return rows
    return [
        replace(
            row,
            name=f"worker {number}",
            hostname="",
            device="",
            current=row.current if owners.get(row.name) == viewer.tenant_id else None,
        )
        for number, row in enumerate(rows, start=1)
    ]
