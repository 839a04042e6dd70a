"""The Celery application of the workers: its tasks, thin wrappers that take ids and call the steps.

Built by :func:`create_app` from settings (never at import time). CUDA and models are touched only inside the
task bodies, i.e. in the pool's child process, never in the prefork parent.
"""

from __future__ import annotations

import logging
import socket
from functools import lru_cache
from typing import Any

from celery import Celery, signals
from sqlalchemy.exc import OperationalError

from shared.broker import make_celery
from shared.dispatch import CeleryDispatcher
from shared.errors import RetryableError
from shared.log_context import job_context
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import (
    CONTROL_QUEUE,
    DELIVER_WEBHOOKS,
    PLAN,
    REAP,
    RENDER_CHUNK,
    STITCH,
    STITCH_QUEUE,
    render_queue,
)
from workers import planning, presence, reaping, rendering, stitching, webhooks
from workers.engines.family import detect_family
from workers.metrics import WorkerMetrics, serve
from workers.runtime import Runtime

logger = logging.getLogger(__name__)

_RETRY: dict[str, Any] = {
    "autoretry_for": (RetryableError, OperationalError),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 20,
}


def worker_queues(family: str, *, control: bool = True, stitch: bool = True, render: bool = True) -> list[str]:
    queues = [CONTROL_QUEUE] if control else []
    queues += [STITCH_QUEUE] if stitch else []
    queues += [render_queue(family), render_queue("any")] if render else []
    return queues


def create_app(settings: Settings) -> Celery:
    app = make_celery(settings)
    app.conf.beat_schedule = {
        "reap": {
            "task": REAP,
            "schedule": settings.reap_interval_seconds,
            "options": {"queue": CONTROL_QUEUE},
        },
        # The webhook outbox's relay; a tick no worker took in time is dropped, the next one covers it.
        "deliver-webhooks": {
            "task": DELIVER_WEBHOOKS,
            "schedule": settings.webhook_poll_seconds,
            "options": {"queue": CONTROL_QUEUE, "expires": max(settings.webhook_poll_seconds * 2, 5.0)},
        },
    }

    metrics = WorkerMetrics()
    _observe(app, settings, metrics)
    presence.register(app, settings)  # the jobs console's workers page
    if settings.warm_models:  # compile in each pool process as it starts (never in the prefork parent)
        signals.worker_process_init.connect(
            lambda **_: _warm(settings), weak=False, dispatch_uid=f"swapfarm-{id(app)}-warm-models"
        )

    @lru_cache(maxsize=4)
    def runtime(hostname: str) -> Runtime:
        family = detect_family(settings)
        return Runtime(
            settings=settings,
            storage=Storage.from_settings(settings),
            dispatcher=CeleryDispatcher(app),
            hostname=hostname,
            family=family,
            metrics=metrics,
        )

    def rt_of(task: Any) -> Runtime:
        return runtime(task.request.hostname or socket.gethostname())

    @app.task(name=PLAN, bind=True, **_RETRY)
    def plan(self: Any, job_id: str) -> None:
        with job_context(job_id=job_id):
            planning.plan(job_id, rt_of(self))

    @app.task(name=RENDER_CHUNK, bind=True, **_RETRY)
    def render_chunk(self: Any, job_id: str, chunk_id: str) -> None:
        with job_context(job_id=job_id, chunk_id=chunk_id):
            rendering.render_chunk(job_id, chunk_id, rt_of(self))

    @app.task(name=STITCH, bind=True, **_RETRY)
    def stitch(self: Any, job_id: str) -> None:
        with job_context(job_id=job_id):
            stitching.stitch(job_id, rt_of(self))

    @app.task(name=REAP, bind=True)
    def reap(self: Any) -> None:
        # Periodic, so the next tick is its retry: retrying each failed tick too would pile reaps up in an outage.
        try:
            reaping.reap(rt_of(self))
        except OperationalError:
            logger.warning("reap skipped: the database is unavailable; the next tick tries again")

    @app.task(name=DELIVER_WEBHOOKS, bind=True)
    def deliver_webhooks(self: Any) -> None:
        # Periodic like the reaper: a failed tick is retried by the next one, the outbox keeps what is due.
        try:
            webhooks.deliver_due(rt_of(self))
        except OperationalError:
            logger.warning("webhooks not delivered: the database is unavailable; the next tick tries again")

    return app


def _warm(settings: Settings) -> None:
    from workers.engines.loading import warm_in_background  # torch, if at all, only in the pool process

    warm_in_background(settings)


def _observe(app: Celery, settings: Settings, metrics: WorkerMetrics) -> None:
    """Hook logging and metrics into the worker's life (Celery signals; ``dispatch_uid`` keeps one hook per app).

    * Logging stays as the entry point configured it (JSON lines with job and chunk ids): a receiver of
      ``setup_logging`` tells Celery not to install its own handlers.
    * The metrics server starts in the process that runs tasks: each prefork child on ``port + its index``
      (``worker_process_init``), or the worker's only process for the solo and thread pools (``worker_ready``).
    * Celery autoretries count as ``swapfarm_retries_total{step="task"}``.
    """
    uid = f"swapfarm-{id(app)}"

    def keep_logging(**_: Any) -> None:
        return None

    def serve_in_child(**_: Any) -> None:
        from billiard.process import current_process

        serve(metrics, settings, index=int(getattr(current_process(), "index", 0) or 0))

    def serve_without_children(sender: Any = None, **_: Any) -> None:
        from celery.concurrency.prefork import TaskPool

        pool_cls = getattr(getattr(sender, "controller", None), "pool_cls", None)
        if not (isinstance(pool_cls, type) and issubclass(pool_cls, TaskPool)):
            serve(metrics, settings)

    def count_retry(**_: Any) -> None:
        metrics.retries.labels(step="task").inc()

    signals.setup_logging.connect(keep_logging, weak=False, dispatch_uid=f"{uid}-logging")
    signals.worker_process_init.connect(serve_in_child, weak=False, dispatch_uid=f"{uid}-metrics-child")
    signals.worker_ready.connect(serve_without_children, weak=False, dispatch_uid=f"{uid}-metrics-ready")
    signals.task_retry.connect(count_retry, weak=False, dispatch_uid=f"{uid}-retries")
