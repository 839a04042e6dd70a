"""Signing in and out of the console (see ``api.ui.sessions`` for what a session is), and where a request
without one goes."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.bodies import read_form
from api.ui.rendering import (
    Look,
    forbidden,
    page,
)
from api.ui.sessions import (
    csrf_ok,
    set_session_cookie,
    set_sign_in_cookie,
    sign_in,
    sign_in_token,
    sign_in_token_ok,
    sign_out,
)
from shared.db import session_scope
from shared.settings import Settings

router = APIRouter(prefix="/ui", include_in_schema=False)


def local_path(target: str | None) -> str:
    """A place to go back to after signing in: a console path, never another site."""
    if target and target.startswith("/ui") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/jobs"


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
    response = page(request, "sign_in.html", {"next": target, "error": error, "token": token}, status=status)
    set_sign_in_cookie(request, response, token)
    return response


@router.get("/sign-in", response_class=HTMLResponse)
def sign_inpage(request: Request, next: Annotated[str | None, Query(max_length=300)] = None) -> HTMLResponse:
    return _sign_in_form(request, local_path(next), None)


@router.post("/sign-in", response_class=HTMLResponse)
async def sign_in_submit(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    form = await read_form(request)
    target = local_path(form.get("next"))
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
    form = await read_form(request)
    if not csrf_ok(viewer, form.get("csrf_token")):
        return forbidden(request, viewer)
    response = RedirectResponse("/ui/sign-in", status_code=303)
    await run_in_threadpool(sign_out, request, response)
    return response
