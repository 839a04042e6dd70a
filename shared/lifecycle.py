"""The lifecycle as data: every state change of a job or a chunk goes through :func:`transition`.

:func:`transition` takes a row type (``Job`` or ``Chunk``), the state to move to, the states the caller expects the
row in — checked against the transition table (``shared.states``), the table's own sources when not given — and
the event to record. It builds the conditional UPDATE (``WHERE status IN (expected) AND <the caller's
conditions>``) and records the event in the caller's transaction, so a late or duplicated task cannot move a row
backwards, and the log and the rows never disagree. Re-entering the state a row is in is allowed: a lease taken
over (an expired plan, chunk or stitch claimed again).

A job that stops counting against its tenant's limit (it succeeded, failed or was cancelled) ends with
:func:`end_job`: its unfinished chunks are cancelled, its webhook queued and its tenant's next waiting jobs admitted
(:func:`admit`, the policy in ``shared.admission``) — one transaction, returning the messages to send. Callers lock
the tenant first (:func:`lock_owner`), then the job, then its chunks, so no two transactions wait on each other.
Callers commit, then send what was returned (Postgres first, Redis second).

``tests/shared/test_lifecycle.py`` fails when code outside this module writes a ``status``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.orm import Session

from shared import webhooks
from shared.admission import admissible, lock_tenant, waiting_tenants
from shared.errors import SwapfarmError, public_message
from shared.events import EventKind, record
from shared.group_end import member_ended
from shared.models import Chunk, Job, utcnow
from shared.states import CHUNK_TRANSITIONS, FINISHED_JOB_STATES, JOB_TRANSITIONS, ChunkStatus, JobStatus
from shared.tasks import PLAN, RENDER_CHUNK, STITCH, Message, message

Status = JobStatus | ChunkStatus


@dataclass(frozen=True)
class Note:
    """The event a transition records for each row it moved (a chunk's event carries its index and worker)."""

    kind: EventKind
    message: str = ""
    error_code: str | None = None
    worker: str | None = None  # a job's step; a chunk's event takes the chunk's worker
    attempt: int | None = None
    row_attempt: bool = False  # the attempt is the row's ``attempts`` after the change


@dataclass(frozen=True)
class Moved:
    """A row a transition moved, as it is after the change."""

    id: str
    job_id: str
    attempts: int
    index: int | None  # chunks only
    extra: tuple[Any, ...]  # the caller's ``returning`` columns


@dataclass(frozen=True)
class Outcome:
    changed: bool  # False: the job was not in a state the change applies to
    messages: list[Message] = field(default_factory=list)


def legal_sources(model: type[Job] | type[Chunk], to: Status) -> frozenset[Status]:
    """The states a row may move to ``to`` from: the transition table's, and ``to`` itself (a lease taken over)."""
    table: Mapping[Any, frozenset[Any]] = JOB_TRANSITIONS if model is Job else CHUNK_TRANSITIONS
    return frozenset(s for s, nxt in table.items() if to in nxt) | {to}


def transition(
    session: Session,
    model: type[Job] | type[Chunk],
    to: Status,
    *,
    where: Sequence[ColumnElement[bool]],
    expected: Iterable[Status] | None = None,
    values: Mapping[str, Any] | None = None,
    note: Note | None = None,
    returning: Sequence[Any] = (),
) -> list[Moved]:
    """Move the rows of ``model`` matching ``where`` and in one of the ``expected`` states to ``to``; record
    ``note`` for each. Returns the rows moved (none: no row was in a state the change applies to).

    Raises:
        ValueError: ``expected`` names a state the transition table does not let a row leave for ``to``.
    """
    legal = legal_sources(model, to)
    sources = tuple(legal - {to}) if expected is None else tuple(expected)
    if not set(sources) <= legal:
        raise ValueError(f"{model.__name__}: no transition to {to} from {sorted(set(sources) - legal)}")
    if model is Job:
        keys: tuple[Any, ...] = (Job.id, Job.id, Job.attempts, Job.id)
    else:
        keys = (Chunk.id, Chunk.job_id, Chunk.attempts, Chunk.index, Chunk.worker)
    rows = session.execute(
        update(model)
        .where(*where, model.status.in_(sources))
        .values(status=to, **(values or {}))
        .returning(*keys, *returning)
    ).all()
    moved = []
    is_job = model is Job
    for row in rows:
        extra = tuple(row[len(keys) :])
        item = Moved(row[0], row[1], int(row[2]), None if is_job else int(row[3]), extra)
        moved.append(item)
        if note is not None:
            record(
                session, item.job_id, note.kind, status=to if is_job else None, chunk_index=item.index,
                attempt=item.attempts if note.row_attempt else note.attempt,
                worker=note.worker if is_job else row[4], error_code=note.error_code, message=note.message,
            )  # fmt: skip
    return moved


def lock_owner(session: Session, job_id: str) -> str | None:
    """Lock the tenant of ``job_id`` (first: see the module's lock order); its id, ``None`` for a job without one."""
    tenant_id = session.scalar(select(Job.tenant_id).where(Job.id == job_id))
    if tenant_id is not None:
        lock_tenant(session, tenant_id)
    return tenant_id


def end_job(
    session: Session,
    job_id: str,
    to: JobStatus,
    *,
    note: Note,
    default_limit: int,
    expected: Iterable[JobStatus] | None = None,
    where: Sequence[ColumnElement[bool]] = (),
    values: Mapping[str, Any] | None = None,
) -> Outcome:
    """End a job (``succeeded``, ``failed``, ``cancelled``): its unfinished chunks are cancelled, its end event
    queued for its webhook and its tenant's next waiting jobs admitted, in the caller's transaction."""
    assert to in FINISHED_JOB_STATES, to
    tenant_id = lock_owner(session, job_id)
    ended = {"finished_at": utcnow(), "lease_token": None, "lease_expires_at": None, **(values or {})}
    moved = transition(
        session, Job, to, where=[Job.id == job_id, *where], expected=expected, values=ended, note=note
    )  # fmt: skip
    if not moved:
        return Outcome(changed=False)
    if to != JobStatus.SUCCEEDED:
        no_lease = {"lease_token": None, "lease_expires_at": None}
        transition(session, Chunk, ChunkStatus.CANCELLED, where=[Chunk.job_id == job_id], values=no_lease)
    webhooks.enqueue(session, job_id, to)
    member_ended(session, job_id)  # its group's end, when it was the last member to end
    return Outcome(changed=True, messages=admit(session, tenant_id, default_limit))


def fail_job(session: Session, job_id: str, error: SwapfarmError, *, default_limit: int) -> Outcome:
    """Fail the job with ``error`` (its code and public message stored) unless it already ended."""
    message_ = public_message(error.message)
    return end_job(
        session, job_id, JobStatus.FAILED, default_limit=default_limit,
        values={"error_code": error.code, "error_message": message_},
        note=Note(EventKind.FAILED, error_code=error.code, message=error.message),
    )  # fmt: skip


# -- admission: a waiting job's next step ----------------------------------------------------------------------


def admit(session: Session, tenant_id: str | None, default_limit: int) -> list[Message]:
    """Move the waiting jobs of the tenant that fit under its limit (``shared.admission``) to their next step;
    returns what to send. Jobs without a tenant (``swapfarm run``) have no limit."""
    messages: list[Message] = []
    for job in admissible(session, tenant_id, default_limit):
        messages += _start(session, job)
    return messages


def admit_all(session: Session, default_limit: int) -> list[Message]:
    """Admit waiting jobs of every tenant that has some (the reaper's sweep)."""
    messages: list[Message] = []
    for tenant_id in waiting_tenants(session):
        messages += admit(session, tenant_id, default_limit)
    return messages


def _start(session: Session, job: Job) -> list[Message]:
    """A waiting job's next step: planning for a new job; for a retried one, the step it failed in."""
    family, priority = job.family, job.priority
    if job.chunks_total is None:
        target, messages = JobStatus.QUEUED, [message(PLAN, job.id, family=family, priority=priority)]
    else:
        pending = session.scalars(
            select(Chunk.id).where(Chunk.job_id == job.id, Chunk.status == ChunkStatus.QUEUED).order_by(Chunk.index)
        ).all()
        messages = [message(RENDER_CHUNK, job.id, chunk_id=c, family=family, priority=priority) for c in pending]
        target = JobStatus.RENDERING
        unfinished = session.scalar(
            select(func.count()).select_from(Chunk)
            .where(Chunk.job_id == job.id, Chunk.status.in_((ChunkStatus.RUNNING, ChunkStatus.HELD)))
        )  # fmt: skip
        if not messages and not unfinished:  # every chunk is done: it failed (or was paused) while stitching
            target, messages = JobStatus.STITCHING, [message(STITCH, job.id, family=family, priority=priority)]
        # A job whose chunks are all held here had its preview's last chunk finish a moment ago: it renders
        # nothing, and the worker that finished that chunk moves it on next (``shared.previewing``, the one way
        # into ``awaiting_approval``, with its deadline, event and webhook).
    values: dict[str, Any] = {
        "attempts": 0, "enqueued_at": utcnow(), "lease_token": None, "lease_expires_at": None, "approval_due_at": None,
    }  # fmt: skip
    moved = transition(
        session, Job, target, where=[Job.id == job.id], expected=(JobStatus.WAITING,), values=values,
        note=Note(EventKind.ADMITTED),
    )  # fmt: skip
    return messages if moved else []
