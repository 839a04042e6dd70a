"""The farm's controls on the console's workers page, for admin keys: pause and resume the whole farm, release a
quarantined worker. Each calls what ``/v1`` calls for it (``shared.control.pause_farm``/``resume_farm``,
``shared.worker_health.release_worker``), which refuses a tenant key (403 ``forbidden``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse, Response

from api.ui.actions import perform
from api.ui.rendering import Look, page
from api.ui.sessions import Viewer
from shared import control
from shared.farm import Farm
from shared.tenants import Principal
from shared.worker_health import release_worker

router = APIRouter(prefix="/ui", include_in_schema=False)

WorkerName = Annotated[str, PathParam(pattern=r"^[A-Za-z0-9@._%+-]{1,255}$")]  # as /v1/workers/{name}
ACTIONS: dict[str, Callable[[Farm, Principal], None]] = {"pause": control.pause_farm, "resume": control.resume_farm}
BACK = "/ui/workers"


@router.post("/farm/{action}")
async def farm_control(request: Request, viewer: Look, action: str) -> Response:
    """Pause or resume the farm (``ACTIONS``); any other action is not found."""
    if action not in ACTIONS:
        return _not_found(request, viewer, f"There is no farm control {action!r}.")
    change = ACTIONS[action]
    return await perform(
        request, viewer, lambda: change(request.app.state.farm, viewer.principal), back=lambda form: BACK,
        missing=lambda: _not_found(request, viewer, "Not found."),
    )  # fmt: skip


@router.post("/workers/{name}/release")
async def release(request: Request, viewer: Look, name: WorkerName) -> Response:
    """Release a quarantined worker: it takes work again."""
    return await perform(
        request, viewer, lambda: release_worker(request.app.state.settings, viewer.principal, name),
        back=lambda form: BACK, missing=lambda: _not_found(request, viewer, f"There is no worker {name}."),
    )  # fmt: skip


def _not_found(request: Request, viewer: Viewer, message: str) -> HTMLResponse:
    return page(request, "message.html", {"viewer": viewer, "title": "Not found", "message": message}, status=404)
