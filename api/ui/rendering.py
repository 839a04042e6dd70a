"""What every console page shares: the templates and their filters, the security headers, the viewer of a
request, and the small pages (refused, not found)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi import Path as PathParam
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.ui.sessions import Viewer, viewer_of
from shared.errors import SwapfarmError, public_message

templates = Jinja2Templates(directory=Path(__file__).parent / "templates")
Look = Annotated[Viewer, Depends(viewer_of)]
JobId = Annotated[str, PathParam(pattern=r"^[0-9a-f]{32}$")]
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


def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> HTMLResponse:
    return templates.TemplateResponse(request, name, context, status_code=status, headers=HEADERS)


def forbidden(request: Request, viewer: Viewer) -> HTMLResponse:
    return page(request, "message.html", {"viewer": viewer, "title": "Refused", "message": (
        "This form was not sent from the console's own page (its CSRF token is missing or wrong). "
        "Reload the page and try again."
    )}, status=403)  # fmt: skip


def refused(request: Request, viewer: Viewer, error: SwapfarmError) -> HTMLResponse:
    """A request the farm refused (a job that cannot be cancelled or retried now): its message, its status."""
    context = {"viewer": viewer, "title": "Not done", "message": public_message(error.message)}
    return page(request, "message.html", context, status=error.http_status)


def not_found(request: Request, viewer: Viewer, job_id: str) -> HTMLResponse:
    context = {"viewer": viewer, "title": "Not found", "message": f"There is no job {job_id}."}
    return page(request, "message.html", context, status=404)
