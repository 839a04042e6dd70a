"""Pause and resume a job, approve or reject its preview (``/v1/jobs/{id}/…``); pause and resume the whole farm
(``/v1/farm/…``, admin keys). Every decision is ``shared.control``'s: the routes carry the request and answer."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi import Path as PathParam
from pydantic import BaseModel

from api.auth import Caller
from api.jobs import read_job
from api.schemas import JOB_ID_EXAMPLE, JobView, error_responses
from shared import control
from shared.db import session_scope

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
farm_router = APIRouter(prefix="/v1/farm", tags=["farm"])

JobId = Annotated[str, PathParam(description="The job's id", examples=[JOB_ID_EXAMPLE])]


@router.post("/{job_id}/pause", response_model=JobView, responses=error_responses(404, 409))
def pause_job(
    request: Request,
    caller: Caller,
    job_id: JobId,
    now: Annotated[
        bool, Query(description="Stop the running chunks too: they are queued again, the attempt not counted")
    ] = False,
) -> JobView:
    """Pause a waiting, queued, planning or rendering job: no new chunk of it starts; running chunks finish (or,
    with ``now``, stop and are queued again). A paused job holds no place of the tenant's limit. Pausing a paused
    job again answers it unchanged; a stitching job (the stitch finishes) or an ended one: 409 ``job_not_pausable``."""
    control.pause(request.app.state.farm, caller, job_id, now=now)
    return read_job(request.app.state.settings, caller, job_id)


@router.post("/{job_id}/resume", status_code=202, response_model=JobView, responses=error_responses(404, 409))
def resume_job(request: Request, caller: Caller, job_id: JobId) -> JobView:
    """Resume a paused job: it waits for the tenant's limit like a new one, then goes on from the chunks already
    done. A job that is not paused: 409 ``job_not_resumable``."""
    control.resume(request.app.state.farm, caller, job_id)
    return read_job(request.app.state.settings, caller, job_id)


@router.post("/{job_id}/approve", status_code=202, response_model=JobView, responses=error_responses(404, 409))
def approve_job(request: Request, caller: Caller, job_id: JobId) -> JobView:
    """Approve a job's preview: the rest of its frames render (the preview's frames are kept, not rendered again).
    A job not awaiting approval: 409 ``job_not_awaiting_approval``."""
    control.approve(request.app.state.farm, caller, job_id)
    return read_job(request.app.state.settings, caller, job_id)


@router.post("/{job_id}/reject", response_model=JobView, responses=error_responses(404, 409))
def reject_job(request: Request, caller: Caller, job_id: JobId) -> JobView:
    """Reject a job's preview: the job is cancelled and its files deleted. A job not awaiting approval: 409
    ``job_not_awaiting_approval``."""
    control.reject(request.app.state.farm, caller, job_id)
    return read_job(request.app.state.settings, caller, job_id)


class FarmView(BaseModel):
    paused: bool


def _farm_view(request: Request) -> FarmView:
    with session_scope(request.app.state.settings.database_url) as session:
        return FarmView(paused=control.farm_paused(session))


@farm_router.get("", response_model=FarmView, responses=error_responses())
def get_farm(request: Request, caller: Caller) -> FarmView:
    """Whether the farm is paused."""
    return _farm_view(request)


@farm_router.post("/pause", response_model=FarmView, responses=error_responses(403))
def pause_farm(request: Request, caller: Caller) -> FarmView:
    """Pause the whole farm (admin keys): no worker starts a chunk until it is resumed; running chunks finish."""
    control.pause_farm(request.app.state.farm, caller)
    return _farm_view(request)


@farm_router.post("/resume", response_model=FarmView, responses=error_responses(403))
def resume_farm(request: Request, caller: Caller) -> FarmView:
    """Resume the farm (admin keys): the queued chunks are sent to the workers again."""
    control.resume_farm(request.app.state.farm, caller)
    return _farm_view(request)
