"""The submit page: the target and sources uploaded with a progress bar, the options built from the
``JobOptions`` schema, and every error shown next to its field."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.slots import KeySlots
from api.ui.forms import PREFIX, OptionsInvalid, form_value_count, form_values, option_fields, read_options
from api.ui.rendering import (
    Look,
    forbidden,
    page,
)
from api.ui.sessions import (
    Viewer,
    csrf_ok,
)
from api.uploads import accept_job, read_job_form
from shared.errors import SwapfarmError
from shared.settings import Settings
from shared.submission import Submission
from shared.tasks import DEFAULT_PRIORITY, MAX_PRIORITY, MIN_PRIORITY

router = APIRouter(prefix="/ui", include_in_schema=False)


_CODE_FIELDS = {
    "upload_too_large": "target",
    "media_not_video": "target",
    "media_unreadable": "target",
    "media_too_long": "target",
    "resolution_too_large": "target",
    "too_many_frames": "target",
    "source_invalid": "source",
    "source_too_large": "source",
    "too_many_sources": "source",
    "audio_unreadable": "source_audio",
    "audio_too_long": "source_audio",
    "audio_too_large": "source_audio",
    "callback_url_invalid": "callback_url",
    "callback_url_forbidden": "callback_url",
}


def _field_of(error: SwapfarmError) -> str:
    """The form field an error is about, shown next to it (``""``: the whole form)."""
    for name in ("target", "source_audio", "source", "priority", "callback_url"):
        if error.message.startswith(f"{name}:"):
            return name
    if error.code == "options_invalid" and "source image" in error.message:
        return "source"
    if error.code in {"options_invalid", "media_format_refused"} and "source audio" in error.message:
        return "source_audio"
    for name in ("trim_start_frame", "trim_end_frame"):  # a range the video or its start refuses
        if error.code in {"trim_out_of_range", "options_invalid"} and error.message.startswith(name):
            return name
    return _CODE_FIELDS.get(error.code, "")


def _submit_context(
    viewer: Viewer, values: Mapping[str, list[str]] | None, errors: dict[str, str], fields: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "viewer": viewer,
        "fields": option_fields(),
        "values": form_values(values),
        "errors": errors,
        "form": fields,
        "priorities": list(range(MIN_PRIORITY, MAX_PRIORITY + 1)),
        "default_priority": DEFAULT_PRIORITY,
    }


@router.get("/jobs/new", response_class=HTMLResponse)
def submitpage(request: Request, viewer: Look) -> HTMLResponse:
    return page(request, "submit.html", _submit_context(viewer, None, {}, {}))


def _accept_field(name: str) -> bool:
    return name.startswith(PREFIX) or name == "csrf_token"


@router.post("/jobs", response_class=HTMLResponse)
async def submit_form(request: Request, viewer: Look) -> Response:
    """The submit form (multipart, streamed and limited like ``POST /v1/jobs``, holding one of the key's upload
    places as it does, submitted by the same ``shared.submission.submit``): a job, or the form again with each error
    next to its field, answered with the status ``/v1`` answers the same refusal with."""
    settings: Settings = request.app.state.settings
    htmx = bool(request.headers.get("hx-request"))
    template = "_submit_form.html" if htmx else "submit.html"
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-upload-"))
    values: Mapping[str, list[str]] | None = None
    fields: dict[str, str] = {}
    slots: KeySlots = request.app.state.upload_slots
    try:
        async with slots.hold(viewer.principal.key_id):  # the key's upload places, shared with POST /v1/jobs
            form = await read_job_form(request, folder, settings, extra=_accept_field, extra_limit=form_value_count())
            values = form.extra
            fields = {"callback_url": form.callback_url or "", "priority": str(form.priority)}
            if not csrf_ok(viewer, next(reversed(form.extra.get("csrf_token", [])), None)):
                return forbidden(request, viewer)
            job = Submission(
                target=form.target.upload, sources=[s.upload for s in form.sources],
                options=read_options(form.extra), priority=form.priority, callback_url=form.callback_url,
                audio=form.audio.upload if form.audio is not None else None,
            )  # fmt: skip
            job_id = await accept_job(request, viewer.principal, job)
    except OptionsInvalid as exc:
        return page(request, template, _submit_context(viewer, values, exc.errors, fields), status=422)
    except SwapfarmError as exc:
        if exc.http_status >= 500:
            raise
        errors = {_field_of(exc): exc.message}
        # the API's status for the same refusal (403 for the admin band, 413, 429 …), the form shown again
        return page(request, template, _submit_context(viewer, values, errors, fields), status=exc.http_status)
    finally:
        await run_in_threadpool(shutil.rmtree, folder, True)
    where = f"/ui/jobs/{job_id}"
    if htmx:
        return Response(status_code=200, headers={"HX-Redirect": where})
    return RedirectResponse(where, status_code=303)
