"""The jobs console at ``/ui``: jobs, a job's chunks, events, stills and output, submitting, and the workers.

Server-rendered pages (Jinja2) that read without JavaScript; htmx (vendored in ``static/``, no build step) keeps
them live and shows the upload's progress. Mounted by :func:`mount`.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.ui import batches, farm_controls, job, listing, signing, submitting
from api.ui.sessions import SignInRequired

__all__ = ["mount"]


def mount(app: FastAPI) -> None:
    """Add the console's pages, its static files and its sign-in redirect to ``app``."""
    # In this order: /ui/jobs/new and /ui/jobs/rows before /ui/jobs/{job_id}.
    for part in (signing, listing, submitting, job, batches, farm_controls):
        app.include_router(part.router)
    app.mount("/ui/static", StaticFiles(directory=Path(__file__).parent / "static"), name="ui-static")
    app.add_exception_handler(SignInRequired, signing.sign_in_required)
