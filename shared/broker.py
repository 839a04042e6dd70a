"""The Celery application's configuration, shared by the senders (API, reaper) and the workers."""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Queue

from shared.options import AcceleratorFamily, choices
from shared.settings import Settings
from shared.tasks import CONTROL_QUEUE, STITCH_QUEUE, render_queue


def celery_config(settings: Settings) -> dict[str, Any]:
    # Redis redelivers an unacknowledged message after the visibility timeout: keep it above the hard time limit
    # so a long chunk is not handed to a second worker while the first still renders it.
    visibility = settings.task_time_limit_seconds + 600
    families: tuple[str, ...] = choices(AcceleratorFamily)
    return {
        "broker_url": settings.broker_url,
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": settings.task_time_limit_seconds,
        "task_soft_time_limit": max(settings.task_time_limit_seconds - 60, 1),
        "broker_transport_options": {"visibility_timeout": visibility},
        "broker_connection_retry_on_startup": True,
        "task_queues": [Queue(CONTROL_QUEUE), Queue(STITCH_QUEUE)]
        + [Queue(render_queue(f)) for f in (*families, "any")],
        "task_default_queue": CONTROL_QUEUE,
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_send_task_events": True,
        "task_send_sent_event": True,
    }


def make_celery(settings: Settings, name: str = "swapfarm") -> Celery:
    app = Celery(name)
    app.conf.update(celery_config(settings))
    return app
