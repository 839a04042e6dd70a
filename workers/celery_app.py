"""The Celery application of the workers: the four tasks, thin wrappers that take ids and call the steps.

Built by :func:`create_app` from settings (never at import time). CUDA and models are touched only inside the
task bodies, i.e. in the pool's child process, never in the prefork parent.
"""

from __future__ import annotations

import logging
import socket
from functools import lru_cache
from typing import Any

from celery import Celery
from sqlalchemy.exc import OperationalError

from shared.broker import make_celery
from shared.dispatch import CeleryDispatcher
from shared.errors import RetryableError
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import CONTROL_QUEUE, PLAN, REAP, RENDER_CHUNK, STITCH, STITCH_QUEUE, render_queue
from workers import planning, reaping, rendering, stitching
from workers.engines.family import detect_family
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
        }
    }

    @lru_cache(maxsize=4)
    def runtime(hostname: str) -> Runtime:
        family = detect_family(settings)
        return Runtime(
            settings=settings,
            storage=Storage(settings.storage_url),
            dispatcher=CeleryDispatcher(app),
            hostname=hostname,
            family=family,
        )

    def rt_of(task: Any) -> Runtime:
        return runtime(task.request.hostname or socket.gethostname())

    @app.task(name=PLAN, bind=True, **_RETRY)
    def plan(self: Any, job_id: str) -> None:
        planning.plan(job_id, rt_of(self))

    @app.task(name=RENDER_CHUNK, bind=True, **_RETRY)
    def render_chunk(self: Any, job_id: str, chunk_id: str) -> None:
        rendering.render_chunk(job_id, chunk_id, rt_of(self))

    @app.task(name=STITCH, bind=True, **_RETRY)
    def stitch(self: Any, job_id: str) -> None:
        stitching.stitch(job_id, rt_of(self))

    @app.task(name=REAP, bind=True, **_RETRY)
    def reap(self: Any) -> None:
        reaping.reap(rt_of(self))

    return app
