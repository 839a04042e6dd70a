"""A console button's POST, the same for every control (a job's, a group's, the farm's, a worker's): the form's
CSRF token, the change (the one function ``/v1`` calls for it, run off the event loop), the page a refusal shows
with the status ``/v1`` answers it with, and the way back to the page the button was on."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.bodies import read_form
from api.ui.rendering import forbidden, refused
from api.ui.sessions import Viewer, csrf_ok
from shared.errors import NotFoundError, SwapfarmError


async def perform(
    request: Request,
    viewer: Viewer,
    change: Callable[[], object],
    back: Callable[[dict[str, str]], str],
    missing: Callable[[], HTMLResponse],
) -> Response:
    """Run ``change`` for a form that carries the session's CSRF token, then go to ``back(form)``; a
    ``NotFoundError`` (no such thing, or another tenant's) is ``missing()``, another refusal its message page."""
    form = await read_form(request)
    if not csrf_ok(viewer, form.get("csrf_token")):
        return forbidden(request, viewer)
    try:
        await run_in_threadpool(change)
    except NotFoundError:
        return missing()
    except SwapfarmError as exc:
        if exc.http_status >= 500:
            raise
        return refused(request, viewer, exc)
    where = back(form)
    if request.headers.get("hx-request"):
        return Response(status_code=200, headers={"HX-Redirect": where})
    return RedirectResponse(where, status_code=303)
