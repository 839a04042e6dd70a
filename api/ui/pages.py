"""The jobs console's pages: server-rendered (Jinja2), readable without JavaScript, made live by htmx.

Every page acts for its viewer (``api.ui.sessions``) with the same rules as ``/v1``: a tenant sees its own jobs
and workers' work, an admin key every tenant's (with a tenant filter); another tenant's job answers 404 exactly like
a missing one. Forms that change something need the session's CSRF token.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.templating import Jinja2Templates
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api import output
from api.jobs import media_limits
from api.schemas import ChunkView, EventView, JobView
from api.ui import fleet
from api.ui.forms import PREFIX, OptionsInvalid, form_values, option_fields, read_options
from api.ui.sessions import (
    Viewer,
    csrf_ok,
    set_session_cookie,
    set_sign_in_cookie,
    sign_in,
    sign_in_token,
    sign_in_token_ok,
    sign_out,
    viewer_of,
)
from api.uploads import read_job_form
from api.views import chunk_view, event_view, job_view, owned_job, page_progress, tenant_names
from api.webhooks import checked_callback
from shared import control, jobs
from shared.db import session_scope
from shared.dispatch import send_all
from shared.errors import NotFoundError, SwapfarmError
from shared.models import Chunk, Job, JobEvent, Tenant
from shared.settings import Settings
from shared.states import FINISHED_JOB_STATES, JobStatus
from shared.storage import Storage
from shared.submission import Owner, submit
from shared.tasks import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY

router = APIRouter(prefix="/ui", include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
Look = Annotated[Viewer, Depends(viewer_of)]
JobId = Annotated[str, PathParam(pattern=r"^[0-9a-f]{32}$")]

PAGE_SIZE = 100
MAX_CHUNKS = 5000  # cells on a chunk map
EVENTS_SHOWN = 200
FORM_LIMIT = 16 * 1024  # bytes of a small (urlencoded) form
# Content-Security-Policy: scripts, styles and media from this origin only; nothing inline, no frames.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; media-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
STILL_NAME = re.compile(r"^[0-9]{2}-(before|after)\.jpg$")


def _when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if value is not None else "—"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {rest:02d}s" if minutes else f"{rest}s"


templates.env.filters["when"] = _when
templates.env.filters["duration"] = _duration


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)
    return response


def _local(target: str | None) -> str:
    """A place to go back to after signing in: a console path, never another site."""
    if target and target.startswith("/ui") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/jobs"


async def _small_form(request: Request) -> dict[str, str]:
    """An urlencoded form of a few fields, read with a cap on its size (the last value of each field)."""
    body = bytearray()
    async for block in request.stream():
        body.extend(block)
        if len(body) > FORM_LIMIT:
            break
    parsed = parse_qs(bytes(body[:FORM_LIMIT]).decode("utf-8", "replace"), max_num_fields=20)
    return {name: values[-1] for name, values in parsed.items()}


def sign_in_required(request: Request, exc: Exception) -> Response:
    """No valid session or key: a script gets 401; a browser goes to the sign-in page (htmx: a full redirect)."""
    if "authorization" in request.headers:
        return HTMLResponse(
            "sign-in required", status_code=401, headers={"WWW-Authenticate": 'Bearer realm="swapfarm"'}
        )
    target = "/ui/sign-in?" + urlencode({"next": request.url.path})
    if request.headers.get("hx-request"):
        return Response(status_code=401, headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


# -- signing in and out ----------------------------------------------------------------------------------


def _sign_in_form(request: Request, target: str, error: str | None, status: int = 200) -> HTMLResponse:
    token = sign_in_token(request)
    response = _page(request, "sign_in.html", {"next": target, "error": error, "token": token}, status=status)
    set_sign_in_cookie(request, response, token)
    return response


@router.get("/sign-in", response_class=HTMLResponse)
def sign_in_page(request: Request, next: Annotated[str | None, Query(max_length=300)] = None) -> HTMLResponse:
    return _sign_in_form(request, _local(next), None)


@router.post("/sign-in", response_class=HTMLResponse)
async def sign_in_submit(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    form = await _small_form(request)
    target = _local(form.get("next"))
    error = None
    if not sign_in_token_ok(request, form.get("csrf_token")):
        error = "The sign-in form expired; please try again."
    else:
        key = form.get("key", "").strip()

        def open_session() -> str | None:
            with session_scope(settings.database_url) as session:
                return sign_in(session, key, settings.ui_session_seconds)

        token = await run_in_threadpool(open_session)
        if token is not None:
            response = RedirectResponse(target, status_code=303)
            set_session_cookie(request, response, token)
            return response
        error = "That API key is unknown or revoked."
    return _sign_in_form(request, target, error, status=401)


@router.post("/sign-out")
async def sign_out_submit(request: Request, viewer: Look) -> Response:
    form = await _small_form(request)
    if not csrf_ok(viewer, form.get("csrf_token")):
        return _forbidden(request, viewer)
    response = RedirectResponse("/ui/sign-in", status_code=303)
    await run_in_threadpool(sign_out, request, response)
    return response


def _forbidden(request: Request, viewer: Viewer) -> HTMLResponse:
    return _page(request, "message.html", {"viewer": viewer, "title": "Refused", "message": (
        "This form was not sent from the console's own page (its CSRF token is missing or wrong). "
        "Reload the page and try again."
    )}, status=403)  # fmt: skip


# -- the jobs list ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filters:
    status: JobStatus | None
    text: str
    tenant: str | None

    def query(self) -> str:
        return urlencode({k: v for k, v in (("status", self.status), ("q", self.text), ("tenant", self.tenant)) if v})


def _filters(viewer: Viewer, status: str | None, q: str | None, tenant: str | None) -> Filters:
    chosen = JobStatus(status) if status in set(JobStatus) else None
    named = tenant if viewer.principal.admin and tenant and re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", tenant) else None
    return Filters(chosen, (q or "").strip()[:100], named)


def _list(session: Session, viewer: Viewer, filters: Filters, settings: Settings) -> list[JobView]:
    principal = viewer.principal
    query = select(Job)
    if filters.tenant is not None:
        query = query.join(Tenant, Tenant.id == Job.tenant_id).where(Tenant.name == filters.tenant)
    elif not principal.admin:
        query = query.where(Job.tenant_id == principal.tenant_id)
    if filters.status is not None:
        query = query.where(Job.status == filters.status)
    if filters.text:
        pattern = "%" + filters.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(or_(Job.target_name.ilike(pattern, escape="\\"), Job.id.startswith(filters.text.lower())))
    rows = session.scalars(query.order_by(Job.created_at.desc(), Job.id.desc()).limit(PAGE_SIZE)).all()
    progress = page_progress(session, rows)
    for job in rows:  # the measured rate and ETA, for the jobs rendering now
        if job.status == JobStatus.RENDERING:
            progress[job.id] = jobs.progress(session, job)
    names = tenant_names(session, principal, rows)
    return [job_view(job, progress[job.id], settings, names) for job in rows]


def _jobs_context(request: Request, viewer: Viewer, filters: Filters) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        views = _list(session, viewer, filters, settings)
        tenants = session.scalars(select(Tenant.name).order_by(Tenant.name)).all() if viewer.principal.admin else []
    return {
        "viewer": viewer,
        "jobs": views,
        "filters": filters,
        "statuses": list(JobStatus),
        "tenants": list(tenants),
        "page_size": PAGE_SIZE,
    }


Status = Annotated[str | None, Query(max_length=16)]
Text = Annotated[str | None, Query(max_length=100)]
TenantName = Annotated[str | None, Query(max_length=64)]


@router.get("", response_class=HTMLResponse)
@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(
    request: Request, viewer: Look, status: Status = None, q: Text = None, tenant: TenantName = None
) -> HTMLResponse:
    context = _jobs_context(request, viewer, _filters(viewer, status, q, tenant))
    return _page(request, "jobs.html", context)


@router.get("/jobs/rows", response_class=HTMLResponse)
def jobs_rows(
    request: Request, viewer: Look, status: Status = None, q: Text = None, tenant: TenantName = None
) -> HTMLResponse:
    context = _jobs_context(request, viewer, _filters(viewer, status, q, tenant))
    return _page(request, "_job_rows.html", context)


# -- submitting ------------------------------------------------------------------------------------------

_CODE_FIELDS = {
    "upload_too_large": "target",
    "media_not_video": "target",
    "media_unreadable": "target",
    "media_too_long": "target",
    "resolution_too_large": "target",
    "too_many_frames": "target",
    "source_invalid": "source",
    "source_too_large": "source",
    "too_many_sources": "source",
    "callback_url_invalid": "callback_url",
    "callback_url_forbidden": "callback_url",
}


def _field_of(error: SwapfarmError) -> str:
    """The form field an error is about, shown next to it (``""``: the whole form)."""
    for name in ("target", "source", "priority", "callback_url"):
        if error.message.startswith(f"{name}:"):
            return name
    if error.code == "options_invalid" and "source image" in error.message:
        return "source"
    return _CODE_FIELDS.get(error.code, "")


def _submit_context(
    viewer: Viewer, values: Mapping[str, list[str]] | None, errors: dict[str, str], fields: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "viewer": viewer,
        "fields": option_fields(),
        "values": form_values(values),
        "errors": errors,
        "form": fields,
        "priorities": list(range(MIN_PRIORITY, MAX_PRIORITY + 1)),
        "default_priority": DEFAULT_PRIORITY,
    }


@router.get("/jobs/new", response_class=HTMLResponse)
def submit_page(request: Request, viewer: Look) -> HTMLResponse:
    return _page(request, "submit.html", _submit_context(viewer, None, {}, {}))


def _accept_field(name: str) -> bool:
    return name.startswith(PREFIX) or name == "csrf_token"


@router.post("/jobs", response_class=HTMLResponse)
async def submit_form(request: Request, viewer: Look) -> Response:
    """The submit form (multipart, streamed and limited like ``POST /v1/jobs``): a job, or the form again with
    each error next to its field (422)."""
    settings: Settings = request.app.state.settings
    htmx = bool(request.headers.get("hx-request"))
    template = "_submit_form.html" if htmx else "submit.html"
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-upload-"))
    values: Mapping[str, list[str]] | None = None
    fields: dict[str, str] = {}
    try:
        form = await read_job_form(request, folder, settings, extra=_accept_field)
        values = form.extra
        fields = {"callback_url": form.callback_url or "", "priority": str(form.priority)}
        if not csrf_ok(viewer, next(reversed(form.extra.get("csrf_token", [])), None)):
            return _forbidden(request, viewer)
        options = read_options(form.extra)
        callback_url = await checked_callback(settings, form.callback_url)
        job_id = await run_in_threadpool(
            lambda: submit(
                database_url=settings.database_url,
                storage=request.app.state.storage,
                dispatcher=request.app.state.dispatcher,
                target=form.target.upload,
                sources=[s.upload for s in form.sources],
                options=options,
                owner=Owner(tenant_id=viewer.principal.tenant_id, default_limit=settings.max_running_jobs_per_tenant),
                priority=form.priority,
                limits=media_limits(settings),
                callback_url=callback_url,
            )
        )
    except OptionsInvalid as exc:
        return _page(request, template, _submit_context(viewer, values, exc.errors, fields), status=422)
    except SwapfarmError as exc:
        if exc.http_status >= 500:
            raise
        errors = {_field_of(exc): exc.message}
        return _page(request, template, _submit_context(viewer, values, errors, fields), status=422)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)
    where = f"/ui/jobs/{job_id}"
    if htmx:
        return Response(status_code=200, headers={"HX-Redirect": where})
    return RedirectResponse(where, status_code=303)


# -- a job -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StillPair:
    frame: int
    seconds: float
    before: str
    after: str


def _stills(storage: Storage, job_id: str) -> list[StillPair]:
    """The job's before/after stills, from the manifest the stitcher wrote (none for older or failed jobs)."""
    try:
        with storage.open_read(storage.job_url(job_id, "stills", "stills.json")) as handle:
            manifest = json.loads(handle.read(64 * 1024))
        return [
            StillPair(int(s["frame"]), float(s["seconds"]), f"/ui/jobs/{job_id}/stills/{s['before']}",
                      f"/ui/jobs/{job_id}/stills/{s['after']}")
            for s in manifest.get("stills", [])
            if STILL_NAME.match(str(s.get("before", ""))) and STILL_NAME.match(str(s.get("after", "")))
        ]  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _job_context(request: Request, viewer: Viewer, job_id: str) -> dict[str, Any]:
    """Everything the job page shows.

    Raises:
        NotFoundError: no such job, or another tenant's.
    """
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, viewer.principal, job_id)
        view = job_view(job, jobs.progress(session, job), settings, tenant_names(session, viewer.principal, [job]))
        chunks: list[ChunkView] = [
            chunk_view(c)
            for c in session.scalars(
                select(Chunk).where(Chunk.job_id == job.id).order_by(Chunk.index).limit(MAX_CHUNKS)
            ).all()
        ]
        recent: list[EventView] = [
            event_view(e)
            for e in reversed(
                session.scalars(
                    select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id.desc()).limit(EVENTS_SHOWN)
                ).all()
            )
        ]
    finished = view.status in FINISHED_JOB_STATES
    playable = view.status == JobStatus.SUCCEEDED and not view.expired
    return {
        "viewer": viewer,
        "job": view,
        "chunks": chunks,
        "events": recent,
        "finished": finished,
        "playable": playable,
        "stills": _stills(request.app.state.storage, job_id) if playable else [],
        "can_cancel": not finished,
        "can_retry": view.status == JobStatus.FAILED and not view.expired,
    }


def _not_found(request: Request, viewer: Viewer, job_id: str) -> HTMLResponse:
    context = {"viewer": viewer, "title": "Not found", "message": f"There is no job {job_id}."}
    return _page(request, "message.html", context, status=404)


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, viewer: Look, job_id: str) -> HTMLResponse:
    try:
        return _page(request, "job.html", _job_context(request, viewer, job_id))
    except NotFoundError:
        return _not_found(request, viewer, job_id)


@router.get("/jobs/{job_id}/live", response_class=HTMLResponse)
def job_live(request: Request, viewer: Look, job_id: str) -> HTMLResponse:
    try:
        return _page(request, "_job_live.html", _job_context(request, viewer, job_id))
    except NotFoundError:
        return _not_found(request, viewer, job_id)


async def _act(request: Request, viewer: Viewer, job_id: str, action: str) -> Response:
    """Cancel or retry from the job page, by the same rules as ``POST /v1/jobs/{id}/cancel|retry``."""
    form = await _small_form(request)
    if not csrf_ok(viewer, form.get("csrf_token")):
        return _forbidden(request, viewer)
    settings: Settings = request.app.state.settings

    def change() -> control.Outcome | None:
        with session_scope(settings.database_url) as session:
            job = owned_job(session, viewer.principal, job_id)
            if action == "cancel":
                return control.cancel_job(session, job.id, settings.max_running_jobs_per_tenant)
            if job.expired_at is not None:
                return None
            return control.retry_job(session, job.id, settings.max_running_jobs_per_tenant)

    try:
        outcome = await run_in_threadpool(change)
    except NotFoundError:
        return _not_found(request, viewer, job_id)
    if outcome is not None and outcome.changed:
        send_all(request.app.state.dispatcher, outcome.messages)
        if action == "cancel":
            storage: Storage = request.app.state.storage
            await run_in_threadpool(storage.delete, storage.job_url(job_id), recursive=True)
    where = f"/ui/jobs/{job_id}"
    if request.headers.get("hx-request"):
        return Response(status_code=200, headers={"HX-Redirect": where})
    return RedirectResponse(where, status_code=303)


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, viewer: Look, job_id: JobId) -> Response:
    return await _act(request, viewer, job_id, "cancel")


@router.post("/jobs/{job_id}/retry")
async def retry(request: Request, viewer: Look, job_id: JobId) -> Response:
    return await _act(request, viewer, job_id, "retry")


@router.get("/jobs/{job_id}/output")
def job_output(request: Request, viewer: Look, job_id: JobId, download: bool = False) -> StreamingResponse:
    """The output for the page's ``<video>`` (inline, with Range requests) or as a download."""
    response = output.get_output(request, viewer.principal, job_id, request.headers.get("range"))
    if not download:
        response.headers["content-disposition"] = response.headers["content-disposition"].replace(
            "attachment", "inline", 1
        )
    response.headers["cache-control"] = "private, no-store"
    return response


def _blocks(storage: Storage, url: str) -> Iterator[bytes]:
    with storage.open_read(url) as handle:
        while block := handle.read(1 << 16):
            yield block


@router.get("/jobs/{job_id}/stills/{name}")
def job_still(request: Request, viewer: Look, job_id: JobId, name: str) -> Response:
    settings: Settings = request.app.state.settings
    if not STILL_NAME.match(name):
        return _not_found(request, viewer, job_id)
    with session_scope(settings.database_url) as session:
        try:
            owned_job(session, viewer.principal, job_id)
        except NotFoundError:
            return _not_found(request, viewer, job_id)
    storage: Storage = request.app.state.storage
    url = storage.job_url(job_id, "stills", name)
    if not storage.exists(url):
        return _not_found(request, viewer, job_id)
    return StreamingResponse(
        _blocks(storage, url), media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"}
    )


# -- workers ---------------------------------------------------------------------------------------------


def _workers_context(request: Request, viewer: Viewer) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        rows = fleet.worker_rows(session, viewer.principal, settings.heartbeat_seconds)
    return {"viewer": viewer, "workers": rows}


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, viewer: Look) -> HTMLResponse:
    return _page(request, "workers.html", _workers_context(request, viewer))


@router.get("/workers/rows", response_class=HTMLResponse)
def workers_rows(request: Request, viewer: Look) -> HTMLResponse:
    return _page(request, "_worker_rows.html", _workers_context(request, viewer))
