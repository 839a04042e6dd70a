"""The Celery application's configuration, shared by the senders (API, reaper) and the workers."""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.entity import Queue
from kombu.exceptions import ChannelError

from shared.options import AcceleratorFamily, choices
from shared.settings import Settings
from shared.tasks import (
    CONTROL_QUEUE,
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    STITCH_QUEUE,
    broker_priority,
    render_queue,
)


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
        # Job priorities: one Redis list per priority level and queue; a worker pops the most urgent level of
        # all its queues first (0 is served first, see ``broker_priority``), then its queues in the order given.
        "broker_transport_options": {
            "visibility_timeout": visibility,
            "priority_steps": list(range(MIN_PRIORITY, MAX_PRIORITY + 1)),
            "queue_order_strategy": "priority",
        },
        # Celery beat's messages (the reaper) rank with a default job's, not above every job.
        "task_default_priority": broker_priority(DEFAULT_PRIORITY),
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


def queue_names(app: Celery) -> list[str]:
    """The farm's queues, in the order the configuration declares them."""
    return [queue.name for queue in app.conf.task_queues]


def queue_depths(app: Celery) -> dict[str, int]:
    """Messages waiting in each of the farm's queues, as the broker counts them.

    A passive declare asks the transport for the count: with Redis that is the LLEN of the queue's list summed
    over its priority lists (``<queue>``, ``<queue>\\x06\\x161`` …), honouring the transport options above, so
    the count stays right whatever priority steps or key prefix the configuration sets. Messages a worker has
    taken but not acknowledged, and retries waiting for their countdown inside a worker, are not waiting here.
    """
    depths: dict[str, int] = {}
    with app.connection_for_read() as conn:
        for name in queue_names(app):
            channel = conn.channel()
            try:
                depths[name] = int(channel.queue_declare(queue=name, passive=True).message_count)
            except ChannelError:  # the broker holds no such queue yet: nothing was ever left waiting in it
                depths[name] = 0
            finally:
                channel.close()
    return depths
