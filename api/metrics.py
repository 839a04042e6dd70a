"""``/metrics``: the farm as Prometheus sees it, read fresh at every scrape.

* ``swapfarm_jobs{state}`` and ``swapfarm_chunks{state}``: rows by state, from the database (every state is
  listed, zeros included, so a dashboard never loses a series).
* ``swapfarm_queue_depth{queue}``: messages waiting in each Celery queue, from the broker (see
  :func:`shared.broker.queue_depths`). Flower does not export it; it is what an autoscaler scales workers on.
* ``swapfarm_missing_from_broker{step}``: work Postgres says is queued that the broker holds no message for
  (``render``: chunks; ``plan``, ``stitch``: jobs), queued longer than a few seconds ago. Non-zero for more than a
  few reaper sweeps means lost messages are not being re-sent (is ``swapfarm beat`` running?). Only with a Redis
  broker, whose queues can be read without taking their messages.
* ``swapfarm_chunks_lease_overdue``: running chunks whose lease expired: their worker stopped heartbeating and the
  reaper has not re-queued them yet. Non-zero for longer than a sweep or two means no reaper runs.
* ``swapfarm_workers_quarantined``: workers that take no work until an admin releases them (``shared.worker_health``).
* ``swapfarm_metrics_source_up{source}``: 1 when the database (``database``) or broker (``broker``) answered this
  scrape; a source that is down drops its series from the scrape instead of failing it.

Each worker process serves its own rendering series (``workers.metrics``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from shared import control, reaper
from shared.broker import BrokerContents, broker_contents, queue_depths
from shared.db import session_scope
from shared.models import Chunk, Job, WorkerPresence
from shared.states import ChunkStatus, JobStatus

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["FarmCollector", "registry_for", "router"]

logger = logging.getLogger(__name__)
router = APIRouter(tags=["metrics"])


class FarmCollector(Collector):
    """Jobs and chunks by state (database) and queue depth (broker), collected at scrape time."""

    def __init__(self, database_url: str, celery: Celery, *, lease_seconds: float = 15.0) -> None:
        self._database_url = database_url
        self._celery = celery
        self._lease_seconds = lease_seconds

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "swapfarm_metrics_source_up", "1 when the source answered this scrape, else 0", labels=["source"]
        )
        try:
            jobs, chunks, paused = self._states()
        except SQLAlchemyError as exc:
            logger.warning("metrics: database unavailable: %s", exc.__class__.__name__)
            up.add_metric(["database"], 0.0)
        else:
            yield jobs
            yield chunks
            yield self._quarantined()
            yield paused
            up.add_metric(["database"], 1.0)
        try:
            depths = queue_depths(self._celery)
        except Exception as exc:  # whatever the transport raises when the broker is away: reported, never fatal
            logger.warning("metrics: broker unavailable: %s", exc.__class__.__name__)
            up.add_metric(["broker"], 0.0)
        else:
            depth = GaugeMetricFamily(
                "swapfarm_queue_depth", "Messages waiting in each Celery queue (all priorities)", labels=["queue"]
            )
            for queue, count in depths.items():
                depth.add_metric([queue], float(count))
            yield depth
            up.add_metric(["broker"], 1.0)
        yield from self._recovery()
        yield up

    def _recovery(self) -> Iterator[Metric]:
        """The recovery gauges; a source that does not answer leaves them out of this scrape."""
        try:
            contents: BrokerContents | None = broker_contents(self._celery)
        except Exception:  # the broker is away (counted above)
            contents = None
        try:
            with session_scope(self._database_url) as session:
                overdue = reaper.overdue_leases(session)
                lost = reaper.missing(session, contents, taken_within=self._lease_seconds) if contents else None
        except SQLAlchemyError:
            return
        gauge = GaugeMetricFamily(
            "swapfarm_chunks_lease_overdue",
            "Running chunks whose lease expired (their worker stopped heartbeating), not yet re-queued",
        )
        gauge.add_metric([], float(overdue))
        yield gauge
        if lost is not None:
            missing = GaugeMetricFamily(
                "swapfarm_missing_from_broker",
                "Work queued in Postgres with no message in the broker (render: chunks; plan, stitch: jobs)",
                labels=["step"],
            )
            for step in ("plan", "render", "stitch"):
                missing.add_metric([step], float(sum(work.step == step for work in lost)))
            yield missing

    def _quarantined(self) -> GaugeMetricFamily:
        with session_scope(self._database_url) as session:
            count = session.scalar(
                select(func.count()).select_from(WorkerPresence).where(WorkerPresence.quarantined_at.is_not(None))
            )
        gauge = GaugeMetricFamily(
            "swapfarm_workers_quarantined",
            "Workers quarantined (failures on several jobs) until an admin releases them",
        )
        gauge.add_metric([], float(count or 0))
        return gauge

    def _states(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        with session_scope(self._database_url) as session:
            job_counts = {
                state: n for state, n in session.execute(select(Job.status, func.count()).group_by(Job.status))
            }
            chunk_counts = {
                state: n for state, n in session.execute(select(Chunk.status, func.count()).group_by(Chunk.status))
            }
            farm_paused = control.farm_paused(session)
        jobs = GaugeMetricFamily("swapfarm_jobs", "Jobs by state", labels=["state"])
        for job_state in JobStatus:
            jobs.add_metric([job_state.value], float(job_counts.get(job_state.value, 0)))
        chunks = GaugeMetricFamily("swapfarm_chunks", "Chunks by state", labels=["state"])
        for chunk_state in ChunkStatus:
            chunks.add_metric([chunk_state.value], float(chunk_counts.get(chunk_state.value, 0)))
        paused = GaugeMetricFamily("swapfarm_farm_paused", "1 while an admin has paused the farm (no chunk starts)")
        paused.add_metric([], 1.0 if farm_paused else 0.0)
        return jobs, chunks, paused


def registry_for(database_url: str, celery: Celery, *, lease_seconds: float = 15.0) -> CollectorRegistry:
    """A registry of the API process's farm-wide series (its own, not the global default registry)."""
    registry = CollectorRegistry()
    registry.register(FarmCollector(database_url, celery, lease_seconds=lease_seconds))
    return registry


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """The farm's series in Prometheus' text format."""
    return Response(generate_latest(request.app.state.metrics), media_type=CONTENT_TYPE_LATEST)
