"""A job's page: status, progress and times, the chunk map, the event log (live while the job runs), the
before/after stills, the output in a ``<video>`` (Range requests), download, and its controls: cancel, retry,
pause (now), resume, approve and reject; why a job that could run waits (its ``wait_reason``)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from sqlalchemy import select

from api import output
from api.schemas import ChunkView, EventView
from api.ui.actions import perform
from api.ui.rendering import JobId, Look, not_found, page
from api.ui.sessions import Viewer
from api.views import chunk_view, event_view, job_view, tenant_names
from shared import control
from shared.db import session_scope
from shared.errors import NotFoundError, NoWorkerWithTagsError
from shared.farm import Farm
from shared.models import Chunk, JobEvent
from shared.progress import progress_of
from shared.settings import Settings
from shared.states import FINISHED_JOB_STATES, PAUSABLE_JOB_STATES, JobStatus
from shared.storage import Storage
from shared.tenants import Principal, owned_job

router = APIRouter(prefix="/ui", include_in_schema=False)
MAX_CHUNKS = 5000  # cells on a chunk map
EVENTS_SHOWN = 200
STILL_NAME = re.compile(r"^[0-9]{2}-(before|after)\.jpg$")


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
        required_tags = [tag for tag in job.required_tags.split(",") if tag]
        view = job_view(job, progress_of(session, job), settings, tenant_names(session, viewer.principal, [job]))
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
    previewed = view.status == JobStatus.AWAITING_APPROVAL
    return {
        "viewer": viewer,
        "job": view,
        "chunks": chunks,
        "events": recent,
        "finished": finished,
        "playable": playable,
        "stills": _stills(request.app.state.storage, job_id) if playable or previewed else [],
        "controls": CONTROLS.get(JobStatus(view.status), ()),
        "required_tags": required_tags,
        "wait_text": WAIT_REASONS.get(view.wait_reason or "", view.wait_reason),
        "can_cancel": not finished,
        "can_retry": view.status == JobStatus.FAILED and not view.expired,
    }


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def jobpage(request: Request, viewer: Look, job_id: str) -> HTMLResponse:
    try:
        return page(request, "job.html", _job_context(request, viewer, job_id))
    except NotFoundError:
        return not_found(request, viewer, job_id)


@router.get("/jobs/{job_id}/live", response_class=HTMLResponse)
def job_live(request: Request, viewer: Look, job_id: str) -> HTMLResponse:
    try:
        return page(request, "_job_live.html", _job_context(request, viewer, job_id))
    except NotFoundError:
        return not_found(request, viewer, job_id)


# The job page's buttons for a job in each state (the action is a ``shared.control`` function, ``ACTIONS``)
CONTROLS: dict[JobStatus, tuple[tuple[str, str], ...]] = {
    **{s: (("pause", "Pause the job"),) for s in PAUSABLE_JOB_STATES},
    # only a rendering job has running chunks to stop
    JobStatus.RENDERING: (("pause", "Pause the job"), ("pause-now", "Pause now, stopping its running chunks")),
    JobStatus.PAUSED: (("resume", "Resume the job"),),
    JobStatus.AWAITING_APPROVAL: (("approve", "Approve the preview"), ("reject", "Reject the preview")),
}
ACTIONS: dict[str, Callable[[Farm, Principal, str], None]] = {
    "cancel": control.cancel, "retry": control.retry, "pause": control.pause,
    "pause-now": partial(control.pause, now=True), "resume": control.resume, "approve": control.approve,
    "reject": control.reject,
}  # fmt: skip
# What a job's ``wait_reason`` means, in a sentence (the code is shown beside it)
WAIT_REASONS = {NoWorkerWithTagsError.code: "no live worker has every tag this job requires"}


async def _act(request: Request, viewer: Viewer, job_id: str, action: str) -> Response:
    """A job page's button: ``shared.control``'s function for ``action``, as ``POST /v1/jobs/{id}/…`` calls it."""
    change = ACTIONS[action]
    return await perform(
        request, viewer, lambda: change(request.app.state.farm, viewer.principal, job_id),
        back=lambda form: f"/ui/jobs/{job_id}", missing=lambda: not_found(request, viewer, job_id),
    )  # fmt: skip


@router.post("/jobs/{job_id}/cancel")
async def cancel(request: Request, viewer: Look, job_id: JobId) -> Response:
    return await _act(request, viewer, job_id, "cancel")


@router.post("/jobs/{job_id}/retry")
async def retry(request: Request, viewer: Look, job_id: JobId) -> Response:
    return await _act(request, viewer, job_id, "retry")


@router.post("/jobs/{job_id}/{action}")
async def job_control(request: Request, viewer: Look, job_id: JobId, action: str) -> Response:
    """Pause (now), resume, approve or reject (``ACTIONS``); any other name is not found."""
    if action not in ACTIONS:
        return not_found(request, viewer, job_id)
    return await _act(request, viewer, job_id, action)


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
        return not_found(request, viewer, job_id)
    with session_scope(settings.database_url) as session:
        try:
            owned_job(session, viewer.principal, job_id)
        except NotFoundError:
            return not_found(request, viewer, job_id)
    storage: Storage = request.app.state.storage
    url = storage.job_url(job_id, "stills", name)
    if not storage.exists(url):
        return not_found(request, viewer, job_id)
    return StreamingResponse(
        _blocks(storage, url), media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"}
    )
