"""The lists of the console: jobs (status, progress, rate, ETA, times; filters by status, text and, for
admins, tenant) and workers; both pages poll a fragment of themselves to stay live."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from api.schemas import JobView
from api.ui import fleet
from api.ui.rendering import (
    Look,
    page,
)
from api.ui.sessions import (
    Viewer,
)
from api.views import job_view, page_progress, tenant_names
from shared import control
from shared.db import session_scope
from shared.models import Job, Tenant
from shared.progress import progress_of
from shared.settings import Settings
from shared.states import JobStatus

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE_SIZE = 100  # jobs on the list; filters narrow it


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
            progress[job.id] = progress_of(session, job)
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
def jobspage(
    request: Request, viewer: Look, status: Status = None, q: Text = None, tenant: TenantName = None
) -> HTMLResponse:
    context = _jobs_context(request, viewer, _filters(viewer, status, q, tenant))
    return page(request, "jobs.html", context)


@router.get("/jobs/rows", response_class=HTMLResponse)
def jobs_rows(
    request: Request, viewer: Look, status: Status = None, q: Text = None, tenant: TenantName = None
) -> HTMLResponse:
    context = _jobs_context(request, viewer, _filters(viewer, status, q, tenant))
    return page(request, "_job_rows.html", context)


# -- workers ---------------------------------------------------------------------------------------------


def _workers_context(request: Request, viewer: Viewer) -> dict[str, Any]:
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        rows = fleet.worker_rows(session, viewer.principal, settings.heartbeat_seconds)
        paused = control.farm_paused(session)
    return {"viewer": viewer, "workers": rows, "farm_paused": paused}


@router.get("/workers", response_class=HTMLResponse)
def workerspage(request: Request, viewer: Look) -> HTMLResponse:
    return page(request, "workers.html", _workers_context(request, viewer))


@router.get("/workers/rows", response_class=HTMLResponse)
def workers_rows(request: Request, viewer: Look) -> HTMLResponse:
    return page(request, "_worker_rows.html", _workers_context(request, viewer))
