"""Task names, queues and payloads: the contract between whoever enqueues work and the workers.

:data:`TASKS` is the one table of the farm's tasks: each one's name, queue, payload type and retry policy. Every
message is built from it (:func:`message`), the broker's contents are read with it (``shared.broker``), and the
workers bind each task's step function to it (``workers.steps``), which both Celery (``workers.celery_app``) and
``swapfarm run`` (``workers.local``) run. The API enqueues by *name* (``send_task``) so it never imports worker
code. Payloads are ids, never objects: a task re-reads its rows, so a duplicate or late delivery sees the current
state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict

PLAN: Final = "swapfarm.plan"
RENDER_CHUNK: Final = "swapfarm.render_chunk"
STITCH: Final = "swapfarm.stitch"
REAP: Final = "swapfarm.reap"
DELIVER_WEBHOOKS: Final = "swapfarm.deliver_webhooks"

CONTROL_QUEUE: Final = "control"
STITCH_QUEUE: Final = "stitch"

# A job's priority: 0 (lowest) … 9 (most urgent) orders a tenant's own jobs; ADMIN_PRIORITY, which only admin keys
# may give, is the farm-wide urgent band, served before every tenant's work. Every message of a job carries it.
MIN_PRIORITY: Final = 0
MAX_PRIORITY: Final = 9
ADMIN_PRIORITY: Final = 10
DEFAULT_PRIORITY: Final = 5


def broker_priority(priority: int) -> int:
    """The message priority for the Redis transport, where 0 is served first.

    Tenants' jobs all share one level, whatever their priority: Redis orders messages across every job of every
    tenant, so one tenant's urgent jobs there would starve everyone else's. Which work runs next is decided in
    Postgres instead (``shared.fairness``: tenants take turns, each tenant's own jobs by priority). Only the
    admin band (:data:`ADMIN_PRIORITY`) goes ahead of everything in the broker too.

    >>> broker_priority(ADMIN_PRIORITY), broker_priority(9), broker_priority(0)
    (0, 4, 4)
    """
    return 0 if priority >= ADMIN_PRIORITY else MAX_PRIORITY - DEFAULT_PRIORITY


ANY_FAMILY: Final = "any"  # the family of a job that runs anywhere (``JobOptions.family``'s default)


def render_queue(family: str) -> str:
    """The queue of render work for an accelerator family (``render.cuda``, ``render.cpu`` …).

    Jobs that run anywhere go to ``render.any``, which every worker consumes besides its own family's queue.
    """
    return f"render.{family}"


def render_queues(family: str) -> tuple[str, str]:
    """The render queues a worker of ``family`` consumes: its family's, then ``render.any``.

    >>> render_queues("cuda")
    ('render.cuda', 'render.any')
    """
    return render_queue(family), render_queue(ANY_FAMILY)


class NoPayload(BaseModel):
    """The payload of a periodic task: it sweeps the database, it is about no one job."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class JobPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str


class ChunkPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str
    chunk_id: str


@dataclass(frozen=True)
class Message:
    """A task to send once the transaction that decided it has committed (Postgres first, Redis second)."""

    task: str
    payload: JobPayload | ChunkPayload
    queue: str
    priority: int = DEFAULT_PRIORITY


Payload = NoPayload | JobPayload | ChunkPayload
RENDER_QUEUES: Final = "render.<family>"  # a job's render queue follows its accelerator family (render_queue)


@dataclass(frozen=True)
class TaskSpec:
    """One task of the farm.

    ``step``: the short name of the step in logs, metrics and events (``plan``, ``render`` …). ``retried``: Celery
    retries the task with back-off on a ``RetryableError`` (except ``LeaseLostError``: another worker owns the work
    then) or a database error; periodic tasks are retried by their next tick instead.
    """

    name: str
    queue: str  # a queue name, or RENDER_QUEUES
    payload: type[NoPayload] | type[JobPayload] | type[ChunkPayload]
    step: Literal["plan", "render", "stitch", "reap", "webhooks"]
    retried: bool

    def queue_for(self, family: str) -> str:
        return render_queue(family) if self.queue == RENDER_QUEUES else self.queue

    def work_id(self, kwargs: dict[str, object]) -> str | None:
        """The id a message of this task is about: the chunk's for a chunk payload, the job's for a job payload."""
        field = {ChunkPayload: "chunk_id", JobPayload: "job_id"}.get(self.payload)
        ident = kwargs.get(field) if field else None
        return ident if isinstance(ident, str) and ident else None


TASKS: Final[dict[str, TaskSpec]] = {
    spec.name: spec
    for spec in (
        TaskSpec(PLAN, CONTROL_QUEUE, JobPayload, "plan", retried=True),
        TaskSpec(RENDER_CHUNK, RENDER_QUEUES, ChunkPayload, "render", retried=True),
        TaskSpec(STITCH, STITCH_QUEUE, JobPayload, "stitch", retried=True),
        TaskSpec(REAP, CONTROL_QUEUE, NoPayload, "reap", retried=False),
        TaskSpec(DELIVER_WEBHOOKS, CONTROL_QUEUE, NoPayload, "webhooks", retried=False),
    )
}
JOB_TASKS: Final = tuple(name for name, spec in TASKS.items() if spec.payload is not NoPayload)


# The queue names below are derived from the table, never written out again: the broker declares
# ``declared_queues`` (``shared.broker``), a worker consumes ``worker_queues`` unless told otherwise (``swapfarm
# worker --queues``, as compose.yaml's services are: ``tests/deploy/test_compose.py`` checks them against these).
def fixed_queues() -> list[str]:
    """The queues of the table that do not follow a job's family, in table order.

    >>> fixed_queues()
    ['control', 'stitch']
    """
    return list(dict.fromkeys(spec.queue for spec in TASKS.values() if spec.queue != RENDER_QUEUES))


def worker_queues(family: str) -> list[str]:
    """The queues a worker of ``family`` consumes by default: every fixed queue of the table, then its render
    queues (:func:`render_queues`).

    >>> worker_queues("cpu")
    ['control', 'stitch', 'render.cpu', 'render.any']
    """
    return [*fixed_queues(), *render_queues(family)]


def declared_queues(families: Iterable[str]) -> list[str]:
    """Every queue of a farm whose workers are of ``families``: the fixed ones, each family's render queue, and
    ``render.any``."""
    return list(dict.fromkeys([*fixed_queues(), *(render_queue(f) for f in families), render_queue(ANY_FAMILY)]))


def message(
    task: str, job_id: str, *, family: str, priority: int = DEFAULT_PRIORITY, chunk_id: str | None = None
) -> Message:
    """The message of one step of a job, routed by :data:`TASKS`: its queue (the job's family for renders) and payload.

    Raises:
        KeyError: ``task`` is not a step of a job.
        pydantic.ValidationError: ``chunk_id`` is missing for a chunk's task, or given for a job's.

    >>> message(RENDER_CHUNK, "j", family="cpu", chunk_id="c").queue
    'render.cpu'
    """
    spec = TASKS[task]
    if spec.payload is NoPayload:
        raise KeyError(f"{task} is not a step of a job")
    fields = {"job_id": job_id} if chunk_id is None else {"job_id": job_id, "chunk_id": chunk_id}
    payload = spec.payload.model_validate(fields)
    assert isinstance(payload, JobPayload | ChunkPayload)
    return Message(task, payload, spec.queue_for(family), priority)
