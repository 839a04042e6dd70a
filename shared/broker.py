"""The Celery application's configuration, shared by the senders (API, reaper) and the workers, and what the
broker holds: how many messages wait in each queue, and which work the messages carry."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import Celery
from kombu.entity import Exchange, Queue
from kombu.exceptions import ChannelError

from shared.options import AcceleratorFamily, choices
from shared.settings import Settings
from shared.tasks import (
    CONTROL_QUEUE,
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    TASKS,
    broker_priority,
    declared_queues,
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
        "task_queues": [_queue(name) for name in declared_queues(families)],
        "task_default_queue": CONTROL_QUEUE,
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        # A worker waits for a lost broker as long as it takes (Celery's default gives up after 100 tries), trying
        # every second (``workers.celery_app.Consumer``), so the farm works again as soon as the broker answers.
        "broker_connection_max_retries": None,
    }


def _queue(name: str) -> Queue:
    # Each queue bound to a direct exchange of its own name with its name as the key: what a worker's banner lists
    # is then the routing messages really take (a bare Queue(name) is bound to the default exchange with the
    # default key, so every queue read "exchange=control(direct) key=control").
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


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


# -- the work the broker holds ----------------------------------------------------------------------------------

WorkKey = tuple[str, str]
"""A message's work: ``(task name, id)``, the id being the chunk's for ``render_chunk``, the job's otherwise."""


def work_key(task: str, kwargs: Mapping[str, Any]) -> WorkKey | None:
    """The work a message of the farm carries, or ``None`` for a message that is not a step of a job.

    >>> work_key("swapfarm.render_chunk", {"job_id": "j", "chunk_id": "c"}), work_key("swapfarm.plan", {"job_id": "j"})
    (('swapfarm.render_chunk', 'c'), ('swapfarm.plan', 'j'))
    """
    spec = TASKS.get(task)
    ident = spec.work_id(dict(kwargs)) if spec is not None else None
    return (task, ident) if ident is not None else None


@dataclass(frozen=True)
class BrokerContents:
    """The farm's work the broker holds, read in one transaction.

    ``waiting``: messages in a queue (any priority level). ``taken``: messages delivered to a worker and not yet
    acknowledged, by the time (epoch seconds) the worker took them or, for a message with a countdown, the time it
    is due, whichever is later.
    """

    waiting: frozenset[WorkKey]
    taken: Mapping[WorkKey, float]

    def holds(self, key: WorkKey, *, taken_since: float) -> bool:
        """Whether the broker will see this work done: it waits in a queue, or a worker took it at or after
        ``taken_since`` (a worker claims its work as soon as it takes the message; one that held a message longer
        without claiming the work has died or hangs, and the message only comes back after the visibility
        timeout, an hour later)."""
        return key in self.waiting or self.taken.get(key, float("-inf")) >= taken_since


def broker_contents(app: Celery) -> BrokerContents | None:
    """What the broker holds of the farm's work; ``None`` when its transport is not Redis (the reaper then falls
    back to re-sending what waits longer than ``requeue_after_seconds``).

    With Redis, kombu keeps each queue as one list per priority level (``<queue>``, ``<queue>\\x06\\x161`` …) and
    the messages workers hold unacknowledged in the ``unacked`` hash, indexed by delivery time in
    ``unacked_index``. Every list of every farm queue and both keys are read in one MULTI, so a message moving
    from a queue to a worker is seen in one place or the other, except for the instant between the worker's BRPOP
    and its write to ``unacked`` — callers that act on a missing message look twice.

    Raises:
        kombu.exceptions.OperationalError, redis.exceptions.RedisError, OSError: the broker does not answer.
    """
    from kombu.transport.redis import Channel as RedisChannel

    with app.connection_for_read() as conn:
        channel = conn.channel()
        try:
            if not isinstance(channel, RedisChannel):
                return None
            prefix = channel.global_keyprefix or ""
            lists = [
                prefix + (f"{name}{channel.sep}{step}" if step else name)
                for name in queue_names(app)
                for step in sorted(set(channel.priority_steps))
            ]
            with channel.conn_or_acquire() as client:
                # Commands kombu's prefixing client passes through as they are: the keys above carry the prefix.
                pipe = client.pipeline(transaction=True)
                for name in lists:
                    pipe.execute_command("LRANGE", name, 0, -1)
                pipe.execute_command("HGETALL", prefix + channel.unacked_key)
                pipe.execute_command("ZRANGEBYSCORE", prefix + channel.unacked_index_key, "-inf", "+inf", "WITHSCORES")
                replies = pipe.execute()
        finally:
            channel.close()
    waiting = {work for reply in replies[: len(lists)] for raw in reply or () if (work := _message_work(raw)[0])}
    delivered = _scores(replies[-1])
    taken: dict[WorkKey, float] = {}
    for tag, entry in _pairs(replies[-2]):
        try:
            raw = json.loads(entry)[0]
        except (ValueError, IndexError, TypeError):
            continue
        work, due = _message_work(raw)
        if work is not None:
            at = max(delivered.get(tag, time.time()), due or 0.0)
            taken[work] = max(taken.get(work, at), at)
    return BrokerContents(waiting=frozenset(waiting), taken=taken)


def _message_work(raw: Any) -> tuple[WorkKey | None, float | None]:
    """The work of one stored message (kombu's JSON envelope, Celery's protocol 2 body) and its ETA, if any."""
    try:
        envelope = json.loads(raw) if isinstance(raw, str | bytes) else raw
        headers = envelope.get("headers") or {}
        body = envelope["body"]
        if (envelope.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        _, kwargs, _ = json.loads(body)
        key = work_key(str(headers.get("task", "")), kwargs)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, None
    eta = headers.get("eta")
    try:
        due = datetime.fromisoformat(eta).timestamp() if isinstance(eta, str) else None
    except ValueError:
        due = None
    return key, due


def _pairs(reply: Any) -> Iterator[tuple[str, Any]]:
    items = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    for tag, value in items:
        yield (tag.decode() if isinstance(tag, bytes) else str(tag)), value


def _scores(reply: Any) -> dict[str, float]:
    if isinstance(reply, dict):
        return {(k.decode() if isinstance(k, bytes) else str(k)): float(v) for k, v in reply.items()}
    pairs = reply if reply and isinstance(reply[0], list | tuple) else zip(reply[::2], reply[1::2], strict=True)
    return {(k.decode() if isinstance(k, bytes) else str(k)): float(v) for k, v in pairs}
