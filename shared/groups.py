"""Job groups: one batch submission, many targets, one option set; its members are ordinary jobs.

:func:`submit_group` is the one way a group is made (``POST /v1/groups``; ``swapfarm submit a.mp4 b.mp4 …``). Every
member goes through :func:`shared.submission.submit`, the one submit path, with the group's id; before the first is
stored, every member is checked by :func:`shared.submission.check` (the same decisions), so a member that would
be refused refuses the whole submission, naming it, with nothing stored — or, with ``partial``, the others go
ahead and the answer lists the refused ones. A member refused while storing (a quota reached by the members before
it) cancels the members already made and deletes their files. Limits: ``max_group_members`` members; the tenant's
quotas apply to each member as to any job.

What is done to a group is done to each member through the one function that does it to a job
(``shared.control``): :func:`cancel_group`, :func:`pause_group`, :func:`resume_group`, :func:`retry_group`. When
the last member ends, the group is marked finished and its webhook queued once (``shared.group_end``, called by
``shared.lifecycle.end_job`` in the transaction that ended the member), to the group's callback URL (the members
have none of their own).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from shared import control
from shared.db import session_scope
from shared.errors import (
    GroupMemberRefusedError,
    GroupTooLargeError,
    NotFoundError,
    NotPausableError,
    NotResumableError,
    SwapfarmError,
)
from shared.farm import Farm
from shared.models import Job, JobGroup, new_id
from shared.states import FINISHED_JOB_STATES, PAUSABLE_JOB_STATES, JobStatus
from shared.submission import Submission, check, screen, submit
from shared.tenants import Principal

__all__ = [
    "GroupResult",
    "GroupSubmission",
    "Refused",
    "cancel_group",
    "members",
    "owned_group",
    "retry_group",
    "submit_group",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refused:
    index: int
    target_name: str
    code: str
    message: str


@dataclass(frozen=True)
class GroupSubmission:
    """Many targets with one option set: each member is a Submission with its own target, or its Refused when it
    was refused before it could be read (a JSON body's target URL refused or unreadable)."""

    members: Sequence[Submission | Refused]
    name: str = ""
    callback_url: str | None = None
    partial: bool = False  # True: refused members are listed, the others go ahead


@dataclass(frozen=True)
class GroupResult:
    group_id: str
    job_ids: list[str]
    refused: list[Refused] = field(default_factory=list)


def _refusal(index: int, member: Submission, error: SwapfarmError) -> Refused:
    return Refused(index, member.target.name[:255], error.code, error.message)


def submit_group(farm: Farm, caller: Principal | None, group: GroupSubmission) -> GroupResult:
    """Accept a group for ``caller``: every member checked, then submitted with the group's id.

    Raises:
        GroupTooLargeError: ``group_too_large``: no member, or more than ``max_group_members``.
        GroupMemberRefusedError: ``group_member_refused``: a member would be refused (without ``partial``, or when
            every member would be); the message names it (its place and file name) and its own code.
        What :func:`shared.submission.screen` raises for the group's callback URL.
    """
    settings = farm.settings
    members = list(group.members)
    if not members or len(members) > settings.max_group_members:
        raise GroupTooLargeError(f"target: from 1 to {settings.max_group_members} videos per group")
    readable = [m for m in members if isinstance(m, Submission)]
    first = readable[0] if readable else None
    screen(
        settings, caller, priority=first.priority if first else 0, sources=len(first.sources) if first else 0,
        callback_url=group.callback_url,
    )  # fmt: skip
    refused: list[Refused] = []
    for index, member in enumerate(members):
        if isinstance(member, Refused):
            refused.append(replace(member, index=index))
            continue
        try:
            check(farm, caller, member)
        except SwapfarmError as exc:
            refused.append(_refusal(index, member, exc))
    if refused and (not group.partial or len(refused) == len(members)):
        raise _refused_error(refused)
    group_id = new_id()
    with session_scope(settings.database_url) as session:
        session.add(
            JobGroup(
                id=group_id, tenant_id=caller.tenant_id if caller else None, name=group.name[:255],
                callback_url=group.callback_url,
            )
        )  # fmt: skip
    skipped = {r.index for r in refused}
    made: list[str] = []
    try:
        for index, member in enumerate(members):
            if index in skipped or not isinstance(member, Submission):
                continue
            try:
                made.append(submit(farm, caller, replace(member, group_id=group_id, callback_url=None)))
            except SwapfarmError as exc:
                if not group.partial:
                    raise _refused_error([_refusal(index, member, exc)]) from exc
                refused.append(_refusal(index, member, exc))
    except BaseException:
        _undo(farm, group_id, made)
        raise
    if not made:
        _undo(farm, group_id, made)
        raise _refused_error(refused)
    return GroupResult(group_id, made, sorted(refused, key=lambda r: r.index))


def _refused_error(refused: Sequence[Refused]) -> GroupMemberRefusedError:
    first = refused[0]
    more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
    return GroupMemberRefusedError(
        f"member {first.index + 1} ({first.target_name!r}) refused: {first.code}: {first.message}{more}; "
        "nothing was stored"
    )


def _undo(farm: Farm, group_id: str, made: Sequence[str]) -> None:
    """A submission that stopped part-way: its members made so far are cancelled, their files deleted, and the
    group row removed."""
    settings = farm.settings
    with session_scope(settings.database_url) as session:  # no webhook for a submission that was refused
        session.execute(update(JobGroup).where(JobGroup.id == group_id).values(callback_url=None))
    for job_id in made:
        with session_scope(settings.database_url) as session:
            control.cancel_job(session, job_id, settings.max_running_jobs_per_tenant)
        farm.storage.delete(farm.storage.job_url(job_id), recursive=True)
    with session_scope(settings.database_url) as session:
        if not made:
            session.execute(delete(JobGroup).where(JobGroup.id == group_id))


def owned_group(session: Session, caller: Principal, group_id: str) -> JobGroup:
    """The caller's group (an admin's: any).

    Raises:
        NotFoundError: no such group, or another tenant's.
    """
    group = session.get(JobGroup, group_id)
    if group is None or (not caller.admin and group.tenant_id != caller.tenant_id):
        raise NotFoundError(f"no group {group_id}")
    return group


def members(session: Session, group_id: str) -> list[Job]:
    return list(session.scalars(select(Job).where(Job.group_id == group_id).order_by(Job.created_at, Job.id)))


def cancel_group(farm: Farm, caller: Principal, group_id: str) -> int:
    """Cancel every member that has not ended (``shared.control.cancel``, the one cancel); how many were."""
    with session_scope(farm.settings.database_url) as session:
        owned_group(session, caller, group_id)
        live = [j.id for j in members(session, group_id) if j.status not in FINISHED_JOB_STATES]
    for job_id in live:
        control.cancel(farm, caller, job_id)
    return len(live)


def pause_group(farm: Farm, caller: Principal, group_id: str, *, now: bool = False) -> int:
    """Pause every member that can be paused (``shared.control.pause``, the one pause: not a member stitching,
    awaiting approval, ended or already paused); how many were."""
    with session_scope(farm.settings.database_url) as session:
        owned_group(session, caller, group_id)
        live = [j.id for j in members(session, group_id) if j.status in PAUSABLE_JOB_STATES]
    paused = 0
    for job_id in live:
        try:
            control.pause(farm, caller, job_id, now=now)
            paused += 1
        except NotPausableError:  # it moved on (to stitching, or ended) since it was read
            continue
    return paused


def resume_group(farm: Farm, caller: Principal, group_id: str) -> int:
    """Resume every paused member (``shared.control.resume``, the one resume); how many were."""
    with session_scope(farm.settings.database_url) as session:
        owned_group(session, caller, group_id)
        held = [j.id for j in members(session, group_id) if j.status == JobStatus.PAUSED]
    resumed = 0
    for job_id in held:
        try:
            control.resume(farm, caller, job_id)
            resumed += 1
        except NotResumableError:  # resumed or cancelled since it was read
            continue
    return resumed


def retry_group(farm: Farm, caller: Principal, group_id: str) -> int:
    """Retry every failed member (``shared.control.retry``, the one retry); how many were."""
    with session_scope(farm.settings.database_url) as session:
        owned_group(session, caller, group_id)
        failed = [j.id for j in members(session, group_id) if j.status == JobStatus.FAILED]
        if failed:
            session.execute(update(JobGroup).where(JobGroup.id == group_id).values(finished_at=None))
    for job_id in failed:
        control.retry(farm, caller, job_id)
    return len(failed)
