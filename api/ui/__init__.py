"""The jobs console at ``/ui``: jobs, a job's chunks, events, stills and output, submitting, and the workers.

Server-rendered pages (Jinja2) that read without JavaScript; htmx (vendored in ``static/``, no build step) keeps
them live and shows the upload's progress. Mounted by :func:`mount`.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.ui.pages import router, sign_in_required
from api.ui.sessions import SignInRequired

__all__ = ["mount"]


def mount(app: FastAPI) -> None:
    """Add the console's pages, its static files and its sign-in redirect to ``app``."""
    app.include_router(router)
    app.mount("/ui/static", StaticFiles(directory=Path(__file__).parent / "static"), name="ui-static")
    app.add_exception_handler(SignInRequired, sign_in_required)
