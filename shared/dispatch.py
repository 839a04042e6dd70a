"""How a step hands work to the next: by task name, queue and payload.

The farm sends through Celery (:class:`CeleryDispatcher`); ``swapfarm run`` sends to a local pool. Steps see only
this protocol, so the same step code runs in both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from celery import Celery


class Dispatcher(Protocol):
    def send(self, task: str, payload: BaseModel, *, queue: str, countdown: float | None = None) -> None: ...


class CeleryDispatcher:
    """Enqueue by task name, so the sender never imports the worker's code."""

    def __init__(self, app: Celery) -> None:
        self._app = app

    def send(self, task: str, payload: BaseModel, *, queue: str, countdown: float | None = None) -> None:
        self._app.send_task(task, kwargs=payload.model_dump(), queue=queue, countdown=countdown)
