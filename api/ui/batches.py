"""The console's job groups: the list of the viewer's groups, and a group's page with its jobs (each opens on the
job's own page). What they show is what ``/v1/groups`` answers (``api.groups``); their pause (now), resume, cancel
and retry buttons call what ``POST /v1/groups/{id}/…`` calls (``shared.groups``: each member through
``shared.control``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response

from api.groups import GroupView, jobs_of, list_of, read_group
from api.ui.actions import perform
from api.ui.rendering import Look, page
from api.ui.sessions import Viewer
from shared import groups
from shared.farm import Farm
from shared.states import PAUSABLE_JOB_STATES, JobStatus
from shared.tenants import Principal

router = APIRouter(prefix="/ui", include_in_schema=False)

GroupId = Annotated[str, PathParam(pattern=r"^[0-9a-f]{32}$")]
ACTIONS: dict[str, Callable[[Farm, Principal, str], int]] = {
    "pause": groups.pause_group, "pause-now": partial(groups.pause_group, now=True), "resume": groups.resume_group,
    "cancel": groups.cancel_group, "retry": groups.retry_group,
}  # fmt: skip
_LABELS = {
    "pause": "Pause the group", "pause-now": "Pause the group now, stopping running chunks",
    "resume": "Resume the group", "cancel": "Cancel the group", "retry": "Retry the group's failed jobs",
}  # fmt: skip


def controls(group: GroupView) -> list[tuple[str, str]]:
    """The buttons for ``group`` now: pause while a member can be paused (now, while one renders), resume while
    one is paused, cancel until the last member ends, retry while one has failed (after the group's end too)."""
    members, active = group.jobs, group.status == "active"
    found = [
        ("pause", active and any(state in PAUSABLE_JOB_STATES for state in members)),
        ("pause-now", active and JobStatus.RENDERING in members),
        ("resume", active and JobStatus.PAUSED in members),
        ("cancel", active),
        ("retry", JobStatus.FAILED in members),
    ]
    return [(action, _LABELS[action]) for action, shown in found if shown]


@router.get("/groups", response_class=HTMLResponse)
def groupspage(request: Request, viewer: Look) -> HTMLResponse:
    groups_ = list_of(request.app.state.settings, viewer.principal).groups
    return page(request, "groups.html", {"viewer": viewer, "groups": groups_, "controls": controls})


@router.get("/groups/{group_id}", response_class=HTMLResponse)
def grouppage(request: Request, viewer: Look, group_id: GroupId) -> HTMLResponse:
    settings = request.app.state.settings
    group = read_group(settings, viewer.principal, group_id)
    jobs = jobs_of(settings, viewer.principal, group_id).jobs
    return page(request, "group.html", {"viewer": viewer, "group": group, "jobs": jobs, "controls": controls})


@router.post("/groups/{group_id}/{action}")
async def group_control(request: Request, viewer: Look, group_id: GroupId, action: str) -> Response:
    """Pause (now), resume, cancel or retry every member (``ACTIONS``), then back to the page the button was on
    (the list, with ``back=list``; else the group's page); any other action is not found."""
    if action not in ACTIONS:
        return _not_found(request, viewer, group_id)
    change = ACTIONS[action]
    return await perform(
        request, viewer, lambda: change(request.app.state.farm, viewer.principal, group_id),
        back=lambda form: "/ui/groups" if form.get("back") == "list" else f"/ui/groups/{group_id}",
        missing=lambda: _not_found(request, viewer, group_id),
    )  # fmt: skip


def _not_found(request: Request, viewer: Viewer, group_id: str) -> HTMLResponse:
    context = {"viewer": viewer, "title": "Not found", "message": f"There is no group {group_id}."}
    return page(request, "message.html", context, status=404)
