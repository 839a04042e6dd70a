"""``/v1/groups``: batches — many targets, one option set, one group of jobs (``shared.groups``).

``POST /v1/groups`` takes the multipart form of ``POST /v1/jobs`` with several ``target`` parts (and ``name``,
``partial``); each member is an ordinary job (``/v1/jobs/{id}``). A group answers its progress and ETA, its jobs,
its members' events in one list, cancel and retry for all, and a streamed ZIP of every finished output.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.auth import Caller
from api.group_refs import create_group_from_json
from api.jobs import _parse_options
from api.output import OCTETS, binary_type
from api.schemas import SUBMISSION_BODY, EventView, JobView, error_responses
from api.slots import KeySlots
from api.uploads import accept_group, read_job_form
from api.views import job_view, tenant_names
from shared import groups
from shared.containers import container_of
from shared.db import session_scope
from shared.errors import ConflictError, RequestInvalidError
from shared.models import Job, JobGroup
from shared.options import JobOptions
from shared.progress import group_eta, progress_of
from shared.settings import Settings
from shared.states import JobStatus
from shared.storage import Storage
from shared.submission import Submission
from shared.tenants import Principal

router = APIRouter(prefix="/v1/groups", tags=["groups"])

GroupId = Annotated[str, PathParam(description="The group's id", pattern=r"^[0-9a-f]{32}$")]
GroupStatus = Literal["active", "succeeded", "ended_with_failures", "cancelled"]
_EXTRA = ("name", "partial")
_BLOCK = 1 << 20
_BINARY = {"schema": {"type": "string", "format": "binary"}}
LISTED = 50
GROUP_BODY: dict[str, Any] = {
    **SUBMISSION_BODY,
    "content": {
        "multipart/form-data": {
            **SUBMISSION_BODY["content"]["multipart/form-data"],
            "schema": {
                "type": "object",
                "required": ["target"],
                "properties": {
                    **SUBMISSION_BODY["content"]["multipart/form-data"]["schema"]["properties"],
                    "target": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "description": "The videos, one part each: one job each (max_group_members at most)",
                    },
                    "name": {"type": "string", "maxLength": 255, "description": "A label for the group"},
                    "partial": {
                        "type": "boolean",
                        "default": False,
                        "description": "true: refused members are listed and the others go ahead",
                    },
                },
            },
        },
        "application/json": {"schema": {"$ref": "#/components/schemas/GroupRequest"}},
    },
}


class RefusedMember(BaseModel):
    index: int = Field(description="The member's place among the targets, from 0")
    target_name: str
    code: str
    message: str


class GroupProgress(BaseModel):
    frames_done: int
    frames_total: int | None = Field(description="null until every member is planned")
    percent: float
    eta_seconds: float | None = Field(
        description="Until the last member ends: the frames the unfinished members have left over the rendering "
        "members' rate together (at least the slowest one's ETA); null while none renders or one recovers, while "
        "one is paused or awaiting approval (it waits for a person), and once the group has ended"
    )


class GroupView(BaseModel):
    id: str
    name: str
    status: GroupStatus
    jobs: dict[str, int] = Field(description="Members by state")
    job_ids: list[str]
    progress: GroupProgress
    refused: list[RefusedMember] = Field(default_factory=list, description="With partial: members not made")
    created_at: datetime
    finished_at: datetime | None = Field(description="When the last member ended (the group's webhook is sent)")


class GroupList(BaseModel):
    groups: list[GroupView]


class GroupJobs(BaseModel):
    jobs: list[JobView]


class GroupEvent(EventView):
    job_id: str = Field(description="The member the event is of (the group's own id for the group's events)")


class GroupEvents(BaseModel):
    events: list[GroupEvent]
    next_after: int


def _status(group: JobGroup, counts: dict[str, int]) -> GroupStatus:
    if group.finished_at is None:
        return "active"
    total = sum(counts.values())
    if counts.get(JobStatus.SUCCEEDED, 0) == total:
        return "succeeded"
    if counts.get(JobStatus.CANCELLED, 0) == total:
        return "cancelled"
    return "ended_with_failures"


def view_of(session: Session, group: JobGroup, refused: list[RefusedMember] | None = None) -> GroupView:
    members = groups.members(session, group.id)
    counts: dict[str, int] = {}
    done, total, known = 0, 0, True
    measured = []
    for job in members:
        state = str(job.status)
        counts[state] = counts.get(state, 0) + 1
        progress = progress_of(session, job)
        measured.append((job, progress))
        if progress.frames_total is None:
            known = False
        else:
            total += progress.frames_total
            done += progress.frames_total if job.status == JobStatus.SUCCEEDED else progress.frames_done
    return GroupView(
        id=group.id,
        name=group.name,
        status=_status(group, counts),
        jobs=counts,
        job_ids=[j.id for j in members],
        progress=GroupProgress(
            frames_done=done,
            frames_total=total if known else None,
            percent=round(100.0 * done / total, 1) if known and total else 0.0,
            eta_seconds=group_eta(measured),
        ),
        refused=refused or [],
        created_at=group.created_at,
        finished_at=group.finished_at,
    )


def read_group(settings: Settings, caller: Principal, group_id: str) -> GroupView:
    with session_scope(settings.database_url) as session:
        return view_of(session, groups.owned_group(session, caller, group_id))


@router.post(
    "",
    status_code=202,
    response_model=GroupView,
    responses=error_responses(403, 408, 413, 429),
    openapi_extra={"requestBody": GROUP_BODY},
    name="create",
)
async def create_group(request: Request, caller: Caller) -> JSONResponse:
    """Submit a batch: the form of ``POST /v1/jobs`` with several ``target`` parts (one job each, the same sources
    and options), ``name`` (a label) and ``partial`` (``true``: refused members are listed, the others go ahead;
    else one refused member refuses the whole submission, ``group_member_refused``, naming it). A JSON body
    (``GroupRequest``) names the targets by URL instead (``s3://…`` under a prefix the operator allows)."""
    settings: Settings = request.app.state.settings
    slots: KeySlots = request.app.state.upload_slots
    async with slots.hold(caller.key_id):
        if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            result = await create_group_from_json(request, caller, settings)
        else:
            result = await _create_group(request, caller, settings)
    refused = [RefusedMember(**vars(r)) for r in result.refused]
    view = await run_in_threadpool(_read_new, settings, caller, result.group_id, refused)
    return JSONResponse(
        view.model_dump(mode="json"), status_code=202, headers={"Location": f"/v1/groups/{result.group_id}"}
    )


def _read_new(settings: Settings, caller: Principal, group_id: str, refused: list[RefusedMember]) -> GroupView:
    with session_scope(settings.database_url) as session:
        return view_of(session, groups.owned_group(session, caller, group_id), refused)


async def _create_group(request: Request, caller: Principal, settings: Settings) -> groups.GroupResult:
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-group-"))
    try:
        form = await read_job_form(
            request, folder, settings, extra=lambda name: name in _EXTRA, targets=settings.max_group_members
        )
        options = _parse_options(form.options)
        partial = (form.extra.get("partial") or ["false"])[-1].strip().lower()
        if partial not in {"true", "false", "1", "0", ""}:
            raise RequestInvalidError("partial: true or false")
        name = (form.extra.get("name") or [""])[-1][:255]
        members = [
            Submission(
                target=t.upload, sources=[s.upload for s in form.sources], options=options, priority=form.priority
            )
            for t in form.targets
        ]
        group = groups.GroupSubmission(
            members, name=name, callback_url=form.callback_url, partial=partial in {"true", "1"}
        )
        return await accept_group(request, caller, group)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)


def list_of(settings: Settings, caller: Principal) -> GroupList:
    """The caller's newest groups (the console's list too)."""
    with session_scope(settings.database_url) as session:
        rows = session.scalars(
            select(JobGroup)
            .where(JobGroup.tenant_id == caller.tenant_id)
            .order_by(JobGroup.created_at.desc(), JobGroup.id.desc())
            .limit(LISTED)
        ).all()
        return GroupList(groups=[view_of(session, g) for g in rows])


def jobs_of(settings: Settings, caller: Principal, group_id: str) -> GroupJobs:
    """The group's jobs, in the order of their targets (the console's group page too)."""
    with session_scope(settings.database_url) as session:
        groups.owned_group(session, caller, group_id)
        members = groups.members(session, group_id)
        names = tenant_names(session, caller, members)
        return GroupJobs(jobs=[job_view(j, progress_of(session, j), settings, names) for j in members])


@router.get("", response_model=GroupList, responses=error_responses(), name="list")
def list_groups(request: Request, caller: Caller) -> GroupList:
    """The caller's newest groups (50 at most), newest first."""
    return list_of(request.app.state.settings, caller)


@router.get("/{group_id}", response_model=GroupView, responses=error_responses(404), name="get")
def get_group(request: Request, caller: Caller, group_id: GroupId) -> GroupView:
    """A group's state, its members by state, progress and ETA."""
    return read_group(request.app.state.settings, caller, group_id)


@router.get("/{group_id}/jobs", response_model=GroupJobs, responses=error_responses(404), name="jobs")
def group_jobs(request: Request, caller: Caller, group_id: GroupId) -> GroupJobs:
    """The group's jobs, in the order of their targets."""
    return jobs_of(request.app.state.settings, caller, group_id)


@router.post("/{group_id}/cancel", response_model=GroupView, responses=error_responses(404), name="cancel")
def cancel_group(request: Request, caller: Caller, group_id: GroupId) -> GroupView:
    """Cancel every member that has not ended (each as ``POST /v1/jobs/{id}/cancel`` does)."""
    groups.cancel_group(request.app.state.farm, caller, group_id)
    return read_group(request.app.state.settings, caller, group_id)


@router.post("/{group_id}/pause", response_model=GroupView, responses=error_responses(404), name="pause")
def pause_group(
    request: Request,
    caller: Caller,
    group_id: GroupId,
    now: Annotated[bool, Query(description="Stop the running chunks too (re-queued, not counted as attempts)")] = False,
) -> GroupView:
    """Pause every member that can be paused (each as ``POST /v1/jobs/{id}/pause`` does; a member stitching
    finishes)."""
    groups.pause_group(request.app.state.farm, caller, group_id, now=now)
    return read_group(request.app.state.settings, caller, group_id)


@router.post("/{group_id}/resume", response_model=GroupView, responses=error_responses(404), name="resume")
def resume_group(request: Request, caller: Caller, group_id: GroupId) -> GroupView:
    """Resume every paused member (each as ``POST /v1/jobs/{id}/resume`` does)."""
    groups.resume_group(request.app.state.farm, caller, group_id)
    return read_group(request.app.state.settings, caller, group_id)


@router.post(
    "/{group_id}/retry", status_code=202, response_model=GroupView, responses=error_responses(404, 410), name="retry"
)
def retry_group(request: Request, caller: Caller, group_id: GroupId) -> GroupView:
    """Retry every failed member (each as ``POST /v1/jobs/{id}/retry`` does)."""
    groups.retry_group(request.app.state.farm, caller, group_id)
    return read_group(request.app.state.settings, caller, group_id)


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class _Sink(io.RawIOBase):
    """Where the ZIP writer writes: what it wrote since the last :meth:`take` (it cannot seek, so the writer
    puts each entry's sizes after its data)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def _zip_blocks(storage: Storage, entries: list[tuple[str, str]]) -> Iterator[bytes]:
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, url in entries:
            with storage.open_read(url) as source, archive.open(name, "w", force_zip64=True) as entry:
                while block := source.read(_BLOCK):
                    entry.write(block)
                    yield sink.take()
    yield sink.take()


@router.get(
    "/{group_id}/output",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "A ZIP (stored, not compressed) of every succeeded member's video",
            "content": {"application/zip": _BINARY, OCTETS: _BINARY},
        },
        **error_responses(404, 409),
    },
    name="output",
)
def group_output(request: Request, caller: Caller, group_id: GroupId) -> StreamingResponse:
    """Every succeeded member's output in one ZIP, streamed as it is read from storage; entries are named
    ``<place>-<target name>.mp4`` (letters, digits, ``._-`` only; ``.mov`` for a prores_ks output)."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        groups.owned_group(session, caller, group_id)
        members = groups.members(session, group_id)
        count = session.scalar(select(func.count()).select_from(Job).where(Job.group_id == group_id)) or 0
    entries = []
    for place, job in enumerate(members, start=1):
        if job.status == JobStatus.SUCCEEDED and job.output_url and job.expired_at is None:
            stem = _SAFE.sub("_", Path(job.target_name).stem)[:80].strip("._") or job.id
            extension = container_of(JobOptions.model_validate(job.options).encoder.encoder).extension
            entries.append((f"{place:03d}-{stem}{extension}", job.output_url))
    if not entries:
        raise ConflictError(f"group {group_id}: none of its {count} jobs has an output yet", code="output_not_ready")
    headers = {"Content-Disposition": f'attachment; filename="group-{group_id}.zip"'}
    return StreamingResponse(
        _zip_blocks(request.app.state.storage, entries),
        media_type=binary_type(request, "application/zip"),
        headers=headers,
    )
