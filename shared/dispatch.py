"""How a step hands work to the next: by task name, queue and payload.

The farm sends through Celery (:class:`CeleryDispatcher`); ``swapfarm run`` sends to a local pool. Steps see only
this protocol, so the same step code runs in both.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

from shared.tasks import DEFAULT_PRIORITY, Message, broker_priority

if TYPE_CHECKING:
    from celery import Celery

logger = logging.getLogger(__name__)


class Dispatcher(Protocol):
    def send(
        self,
        task: str,
        payload: BaseModel,
        *,
        queue: str,
        countdown: float | None = None,
        priority: int | None = None,
    ) -> None:
        """Send ``task``; ``priority`` is the job's (0 lowest … 9 most urgent), ``None`` the default."""
        ...


def send_all(dispatcher: Dispatcher, messages: Iterable[Message]) -> None:
    for message in messages:
        dispatcher.send(message.task, message.payload, queue=message.queue, priority=message.priority)


def send_or_leave_to_reaper(dispatcher: Dispatcher, messages: Iterable[Message]) -> None:
    """Send messages for work that is queued in Postgres already; where the broker does not answer, log it and go on
    (the reaper re-sends every queued chunk the broker lacks once it answers), so the caller's own work is not lost
    with the message: a worker that has just claimed a chunk renders it."""
    messages = list(messages)
    try:
        send_all(dispatcher, messages)
    except Exception as exc:  # whatever the transport raises while the broker is away
        what = ", ".join(f"{m.task} {m.payload.model_dump()}" for m in messages)
        logger.warning("left to the reaper (the broker does not answer: %s): %s", type(exc).__name__, what)


class CeleryDispatcher:
    """Enqueue by task name, so the sender never imports the worker's code."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def send(
        self,
        task: str,
        payload: BaseModel,
        *,
        queue: str,
        countdown: float | None = None,
        priority: int | None = None,
    ) -> None:
        level = broker_priority(DEFAULT_PRIORITY if priority is None else priority)
        self._app.send_task(task, kwargs=payload.model_dump(), queue=queue, countdown=countdown, priority=level)
