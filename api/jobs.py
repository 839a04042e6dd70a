"""``/v1/jobs``: submit a job, list and read jobs, cancel and retry them.

Every route acts for the caller's tenant (``api.auth``); a job of another tenant is answered as if it did not exist.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BeforeValidator, ValidationError
from sqlalchemy import and_, or_, select

from api.auth import Caller
from api.references import create_job_from_json
from api.schemas import JOB_ID_EXAMPLE, SUBMISSION_BODY, JobList, JobView, error_responses
from api.slots import KeySlots
from api.uploads import accept_job, read_job_form
from api.views import job_view, page_progress, tenant_names
from shared import control
from shared.db import session_scope
from shared.errors import ForbiddenError, InvalidOptionsError
from shared.models import Job, Tenant
from shared.options import JobOptions
from shared.progress import progress_of
from shared.settings import Settings
from shared.states import JobStatus
from shared.submission import Submission
from shared.tenants import Principal, owned_job

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

JobId = Annotated[str, PathParam(description="The job's id", examples=[JOB_ID_EXAMPLE])]


# Options are a few levels deep; deeper JSON is refused before it is parsed (the parser recurses per level).
MAX_OPTIONS_DEPTH = 8


def _parse_options(raw: str) -> JobOptions:
    if _depth(raw) > MAX_OPTIONS_DEPTH:
        raise InvalidOptionsError(f"options: nested more than {MAX_OPTIONS_DEPTH} levels deep")
    try:
        data = json.loads(raw or "{}")
        return JobOptions.model_validate(data)
    except (json.JSONDecodeError, ValidationError) as exc:
        message = str(exc).splitlines()[0] if isinstance(exc, json.JSONDecodeError) else _first_error(exc)
        raise InvalidOptionsError(f"options: {message}") from exc


def _depth(raw: str) -> int:
    """How deeply brackets nest in a JSON text (brackets inside strings do not count).

    >>> _depth('{"a": [1, {"b": "]]]"}]}')
    3
    """
    depth = deepest = 0
    in_string = escaped = False
    for char in raw:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def read_job(settings: Settings, caller: Principal, job_id: str) -> JobView:
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        return job_view(job, progress_of(session, job), settings, tenant_names(session, caller, [job]))


@router.post(
    "",
    status_code=202,
    response_model=JobView,
    responses=error_responses(403, 408, 409, 413, 429),
    openapi_extra={"requestBody": SUBMISSION_BODY},
)
async def create_job(
    request: Request,
    caller: Caller,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            description="Retrying with the same key and request answers the same job; another request → 409",
        ),
    ] = None,
) -> JSONResponse:
    """Submit a job: the upload is checked against the limits as it streams in, then stored, inserted and queued
    (or ``waiting`` while the tenant is at its limit of jobs running at once). Returns at once (202).

    A JSON body (``JobRequest``) names its inputs by URL instead (``s3://…`` under a prefix the operator allows)."""
    settings: Settings = request.app.state.settings
    slots: KeySlots = request.app.state.upload_slots
    async with slots.hold(caller.key_id):
        if request.headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            job_id = await create_job_from_json(request, caller, idempotency_key, settings)
            return await _accepted(settings, caller, job_id)
        return await _create_job(request, caller, settings, idempotency_key)


async def _create_job(
    request: Request, caller: Principal, settings: Settings, idempotency_key: str | None
) -> JSONResponse:
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-upload-"))
    try:
        form = await read_job_form(request, folder, settings)
        job = Submission(
            target=form.target.upload, sources=[s.upload for s in form.sources], options=_parse_options(form.options),
            priority=form.priority, callback_url=form.callback_url, idempotency_key=idempotency_key,
            audio=form.audio.upload if form.audio is not None else None,
        )  # fmt: skip
        job_id = await accept_job(request, caller, job)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)
    return await _accepted(settings, caller, job_id)


async def _accepted(settings: Settings, caller: Principal, job_id: str) -> JSONResponse:
    view = await run_in_threadpool(read_job, settings, caller, job_id)
    return JSONResponse(
        status_code=202, content=view.model_dump(mode="json"), headers={"Location": f"/v1/jobs/{job_id}"}
    )


# A page ends at a job; the next page starts after it: (created_at, id) in the listing's order. Any text of this
# form is a valid place to start, so the cursor needs no signature or error of its own.
CURSOR = r"^[0-9]{1,19}-[0-9a-f]{32}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _cursor(job: Job) -> str:
    micros = (job.created_at - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}-{job.id}"


def _after_cursor(cursor: str) -> tuple[datetime, str]:
    micros, job_id = cursor.split("-", 1)
    try:
        return _EPOCH + timedelta(microseconds=int(micros)), job_id
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC), job_id


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")


def _rfc3339(value: object) -> object:
    """Only a full RFC 3339 date-time with its offset (what the schema says), not the numbers and bare dates
    pydantic would also take."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("an RFC 3339 date-time with an offset, e.g. 2026-11-29T10:00:00Z")
    return value


DateTime = Annotated[AwareDatetime, BeforeValidator(_rfc3339)]


@router.get("", response_model=JobList, responses=error_responses(403))
def list_jobs(
    request: Request,
    caller: Caller,
    status: Annotated[list[JobStatus] | None, Query(description="Only jobs in these states (repeatable)")] = None,
    created_after: Annotated[DateTime | None, Query(description="Created at or after (RFC 3339)")] = None,
    created_before: Annotated[DateTime | None, Query(description="Created before (RFC 3339)")] = None,
    limit: Annotated[int, Query(ge=1, le=200, description="Jobs per page")] = 50,
    cursor: Annotated[str | None, Query(pattern=CURSOR, description="`next_cursor` of the previous page")] = None,
    tenant: Annotated[
        str | None, Query(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$", description="Admin keys only: one tenant's jobs")
    ] = None,
    all_tenants: Annotated[bool, Query(description="Admin keys only: every tenant's jobs")] = False,
) -> JobList:
    """The caller's jobs, newest first, a page at a time."""
    settings: Settings = request.app.state.settings
    if (tenant is not None or all_tenants) and not caller.admin:
        raise ForbiddenError("listing other tenants' jobs needs an admin key")
    query = select(Job)
    if tenant is not None:
        query = query.join(Tenant, Tenant.id == Job.tenant_id).where(Tenant.name == tenant)
    elif not all_tenants:
        query = query.where(Job.tenant_id == caller.tenant_id)
    if status:
        query = query.where(Job.status.in_([str(s) for s in status]))
    if created_after is not None:
        query = query.where(Job.created_at >= created_after)
    if created_before is not None:
        query = query.where(Job.created_at < created_before)
    if cursor is not None:
        at, last_id = _after_cursor(cursor)
        query = query.where(or_(Job.created_at < at, and_(Job.created_at == at, Job.id < last_id)))
    with session_scope(settings.database_url) as session:
        rows = session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)).all()
        page = rows[:limit]
        progress = page_progress(session, page)
        names = tenant_names(session, caller, page)
        views = [job_view(job, progress[job.id], settings, names) for job in page]
    return JobList(jobs=views, next_cursor=_cursor(page[-1]) if len(rows) > limit else None)


@router.get("/{job_id}", response_model=JobView, responses=error_responses(404))
def get_job(request: Request, caller: Caller, job_id: JobId) -> JobView:
    """A job's state, progress (with the measured rate and ETA), chunk counts and error."""
    return read_job(request.app.state.settings, caller, job_id)


@router.post("/{job_id}/cancel", response_model=JobView, responses=error_responses(404, 409))
def cancel_job(request: Request, caller: Caller, job_id: JobId) -> JobView:
    """Cancel a job that has not ended: queued chunks are dropped, running ones stop after their current batch,
    and the job's files are deleted. Cancelling a cancelled job again answers it unchanged."""
    control.cancel(request.app.state.farm, caller, job_id)
    return read_job(request.app.state.settings, caller, job_id)


@router.post("/{job_id}/retry", status_code=202, response_model=JobView, responses=error_responses(404, 409, 410))
def retry_job(request: Request, caller: Caller, job_id: JobId) -> JobView:
    """Run a failed job again: only its chunks that are not done are rendered again (attempt counts go on).
    The job waits for the tenant's limit like a new one; past the retention time it answers 410 ``job_expired``."""
    control.retry(request.app.state.farm, caller, job_id)
    return read_job(request.app.state.settings, caller, job_id)
