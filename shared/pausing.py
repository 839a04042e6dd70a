"""Pause and resume a job, approve or reject its preview, expire previews past their deadline, and pause and
resume the whole farm: what ``shared.control`` offers every entry point (``/v1``, the console, the CLI through
``/v1``), each one transaction of conditional UPDATEs with its event and the admission it makes possible.

A paused job and a preview awaiting approval hold no place of their tenant's limit (``shared.states``:
``WAITING_JOB_STATES``): pausing admits the next waiting job, and resuming (or approving) sends the job back to
``waiting``, from where admission (``shared.lifecycle.admit``) takes it to the step it stopped in. Callers commit,
then send the returned messages and delete files (Postgres first, then Redis and storage).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared import previewing
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import (
    ForbiddenError,
    NotAwaitingApprovalError,
    NotPausableError,
    NotResumableError,
    PreviewExpiredError,
    SwapfarmError,
)
from shared.events import EventKind
from shared.farm import Farm
from shared.lifecycle import Note, Outcome, admit, end_job, lock_owner, transition
from shared.models import Chunk, FarmControl, Job, utcnow
from shared.states import PAUSABLE_JOB_STATES, ChunkStatus, JobStatus
from shared.tasks import RENDER_CHUNK, message
from shared.tenants import Principal, owned_job

__all__ = [
    "approve",
    "approve_job",
    "expire_previews",
    "farm_paused",
    "pause",
    "pause_farm",
    "pause_job",
    "reject",
    "resume",
    "resume_farm",
    "resume_job",
]


def pause(farm: Farm, caller: Principal, job_id: str, *, now: bool = False) -> None:
    """Pause the caller's job (:func:`pause_job`); a paused job again is no change.

    Raises:
        NotFoundError: no such job, or another tenant's.
        NotPausableError: ``job_not_pausable``: it is stitching (the stitch finishes), awaiting approval, or ended.
    """

    def step(session: Session, job: Job, limit: int) -> Outcome:
        return Outcome(True) if job.status == JobStatus.PAUSED else pause_job(session, job.id, limit, now=now)

    _control(farm, caller, job_id, step, lambda job: NotPausableError(
        f"job {job_id} is {job.status}; only a waiting, queued, planning or rendering job pauses"
    ))  # fmt: skip


def resume(farm: Farm, caller: Principal, job_id: str) -> None:
    """Resume the caller's paused job (:func:`resume_job`).

    Raises:
        NotFoundError: no such job, or another tenant's.
        NotResumableError: ``job_not_resumable``: the job is not paused.
    """
    ttl = farm.settings.preview_ttl_seconds

    def step(session: Session, job: Job, limit: int) -> Outcome:
        return resume_job(session, job.id, limit, preview_ttl_seconds=ttl)

    _control(farm, caller, job_id, step, lambda job: (
        NotResumableError(f"job {job_id} is {job.status}, not paused; only a paused job resumes")
    ))  # fmt: skip


def approve(farm: Farm, caller: Principal, job_id: str) -> None:
    """Approve the caller's preview (:func:`approve_job`): the rest of its frames render.

    Raises:
        NotFoundError: no such job, or another tenant's.
        NotAwaitingApprovalError: ``job_not_awaiting_approval``: the job has no preview waiting.
    """
    _control(farm, caller, job_id, lambda session, job, limit: approve_job(session, job.id, limit), lambda job: (
        NotAwaitingApprovalError(f"job {job_id} is {job.status}, not awaiting approval")
    ))  # fmt: skip


def reject(farm: Farm, caller: Principal, job_id: str) -> None:
    """Reject the caller's preview: the job is cancelled and its files deleted.

    Raises:
        NotFoundError: no such job, or another tenant's.
        NotAwaitingApprovalError: ``job_not_awaiting_approval``: the job has no preview waiting.
    """

    def step(session: Session, job: Job, limit: int) -> Outcome:
        return end_job(
            session, job.id, JobStatus.CANCELLED, expected=(JobStatus.AWAITING_APPROVAL,),
            note=Note(EventKind.CANCELLED, message="the preview was rejected"), default_limit=limit,
        )  # fmt: skip

    _control(farm, caller, job_id, step, lambda job: (
        NotAwaitingApprovalError(f"job {job_id} is {job.status}, not awaiting approval")
    ))  # fmt: skip
    farm.storage.delete(farm.storage.job_url(job_id), recursive=True)


def _control(
    farm: Farm,
    caller: Principal,
    job_id: str,
    step: Callable[[Session, Job, int], Outcome],
    refused: Callable[[Job], SwapfarmError],
) -> None:
    """Apply ``step`` to the caller's job in one transaction, raise ``refused(job)`` when it changed nothing, then
    send the messages it returned (Postgres first, then Redis)."""
    settings = farm.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        outcome = step(session, job, settings.max_running_jobs_per_tenant)
    if not outcome.changed:
        raise refused(job)
    send_all(farm.dispatcher, outcome.messages)


def pause_job(session: Session, job_id: str, default_limit: int, *, now: bool = False) -> Outcome:
    """Pause a job that is waiting, queued, planning or rendering: no chunk of it starts from now on.

    Its running chunks finish (their output is kept); with ``now`` they are stopped at their next heartbeat and
    queued again, the stopped attempt not counted. A plan being made is dropped (the job is planned on resume).
    A paused job holds no place of its tenant's: the next waiting job is admitted. Its messages in the broker find
    it not ``rendering`` and do nothing, and the reaper leaves its rows alone; :func:`resume_job` sends new ones.
    """
    tenant_id = lock_owner(session, job_id)
    moved = transition(
        session, Job, JobStatus.PAUSED, expected=tuple(PAUSABLE_JOB_STATES), where=[Job.id == job_id],
        values={"lease_token": None, "lease_expires_at": None},
        note=Note(EventKind.PAUSED, message="paused now: running chunks stopped" if now else "paused"),
    )  # fmt: skip
    if not moved:
        return Outcome(changed=False)
    if now:
        transition(
            session, Chunk, ChunkStatus.QUEUED, expected=(ChunkStatus.RUNNING,), where=[Chunk.job_id == job_id],
            values={
                "attempts": Chunk.attempts - 1, "frames_done": 0, "lease_token": None, "lease_expires_at": None,
                "enqueued_at": utcnow(),
            },
            note=Note(EventKind.CHUNK_REQUEUED, message="stopped by a pause; not counted as an attempt"),
        )  # fmt: skip
    return Outcome(changed=True, messages=admit(session, tenant_id, default_limit))


def resume_job(session: Session, job_id: str, default_limit: int, *, preview_ttl_seconds: float) -> Outcome:
    """Resume a paused job: it waits for admission like a new one, then goes on from the chunks already done
    (``shared.lifecycle.admit``: planning, the chunks still queued, or the stitch). A job whose preview finished
    while it was paused awaits approval at once (``shared.previewing.await_approval``: its deadline,
    ``preview_ttl_seconds`` from now, its event and its webhook) and needs no place."""
    tenant_id = lock_owner(session, job_id)
    moved = transition(
        session, Job, JobStatus.WAITING, expected=(JobStatus.PAUSED,), where=[Job.id == job_id],
        values={"enqueued_at": utcnow()}, note=Note(EventKind.RESUMED),
    )  # fmt: skip
    if not moved:
        return Outcome(changed=False)
    previewing.await_approval(session, job_id, preview_ttl_seconds)
    return Outcome(changed=True, messages=admit(session, tenant_id, default_limit))


def approve_job(session: Session, job_id: str, default_limit: int) -> Outcome:
    """Approve a preview: its held chunks are queued, and the job waits for admission, then renders them (the
    preview's chunks are done and stay done)."""
    tenant_id = lock_owner(session, job_id)
    moved = transition(
        session, Job, JobStatus.WAITING, expected=(JobStatus.AWAITING_APPROVAL,), where=[Job.id == job_id],
        values={"enqueued_at": utcnow(), "approval_due_at": None}, note=Note(EventKind.APPROVED),
    )  # fmt: skip
    if not moved:
        return Outcome(changed=False)
    transition(
        session, Chunk, ChunkStatus.QUEUED, expected=(ChunkStatus.HELD,), where=[Chunk.job_id == job_id],
        values={"enqueued_at": utcnow()},
    )  # fmt: skip
    return Outcome(changed=True, messages=admit(session, tenant_id, default_limit))


def expire_previews(session: Session, default_limit: int, limit: int = 100) -> tuple[list[str], Outcome]:
    """Cancel the previews not approved by their deadline (``SWAPFARM_PREVIEW_TTL_SECONDS`` after they were
    ready): their ids (the caller deletes their files) and the admissions they made possible."""
    due = session.scalars(
        select(Job.id)
        .where(Job.status == JobStatus.AWAITING_APPROVAL, Job.approval_due_at < utcnow())
        .order_by(Job.approval_due_at)
        .limit(limit)
    ).all()
    cancelled, messages = [], []
    for job_id in due:
        outcome = end_job(
            session, job_id, JobStatus.CANCELLED, expected=(JobStatus.AWAITING_APPROVAL,),
            where=[Job.approval_due_at < utcnow()], default_limit=default_limit,
            note=Note(
                EventKind.CANCELLED, error_code=PreviewExpiredError.code, message="the preview was not approved in time"
            ),
        )  # fmt: skip
        if outcome.changed:
            cancelled.append(job_id)
            messages += outcome.messages
    return cancelled, Outcome(changed=bool(cancelled), messages=messages)


# -- the whole farm ----------------------------------------------------------------------------------------


def farm_paused(session: Session) -> bool:
    """Whether an admin paused the farm (no worker starts a chunk while it is)."""
    return session.scalar(select(FarmControl.paused_at).where(FarmControl.id == 1)) is not None


def pause_farm(farm: Farm, caller: Principal) -> None:
    """Pause the whole farm (admin keys only): no worker starts a chunk of any job until :func:`resume_farm`;
    running chunks finish. Jobs keep their states (a job's own pause is :func:`pause`).

    Raises:
        ForbiddenError: not an admin key.
    """
    if not caller.admin:
        raise ForbiddenError("pausing the farm needs an admin key")
    with session_scope(farm.settings.database_url) as session:
        row = session.get(FarmControl, 1, with_for_update=True)
        if row is None:
            session.add(FarmControl(id=1, paused_at=utcnow()))
        elif row.paused_at is None:
            row.paused_at = utcnow()


def resume_farm(farm: Farm, caller: Principal) -> None:
    """Resume the farm (admin keys only): every queued chunk of a rendering job is sent again (the messages the
    workers took while the farm was paused did nothing).

    Raises:
        ForbiddenError: not an admin key.
    """
    if not caller.admin:
        raise ForbiddenError("resuming the farm needs an admin key")
    with session_scope(farm.settings.database_url) as session:
        row = session.get(FarmControl, 1, with_for_update=True)
        if row is None or row.paused_at is None:
            return
        row.paused_at = None
        queued = session.execute(
            select(Chunk.id, Job.id, Job.family, Job.priority)
            .join(Job, Job.id == Chunk.job_id)
            .where(Chunk.status == ChunkStatus.QUEUED, Job.status == JobStatus.RENDERING)
            .order_by(Job.created_at, Chunk.index)
        ).all()
        messages = [
            message(RENDER_CHUNK, job_id, chunk_id=chunk_id, family=family, priority=int(priority))
            for chunk_id, job_id, family, priority in queued
        ]
    send_all(farm.dispatcher, messages)
