"""Task names, queues and payloads: the contract between whoever enqueues work and the workers.

The API enqueues by *name* (``send_task``) so it never imports worker code. Payloads are ids, never objects:
a task re-reads its rows, so a duplicate or late delivery sees the current state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

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


def render_queue(family: str) -> str:
    """The queue of render work for an accelerator family (``render.cuda``, ``render.cpu`` …).

    Jobs that run anywhere go to ``render.any``, which every worker consumes besides its own family's queue.
    """
    return f"render.{family}"


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
