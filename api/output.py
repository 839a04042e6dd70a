"""``GET /v1/jobs/{id}/output``: the finished video, streamed from storage, with single-range requests (206);
``GET /v1/jobs/{id}/stills``: its before/after stills (of the preview, while it awaits approval)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from api.auth import Caller
from api.schemas import JOB_ID_EXAMPLE, error_responses
from shared.containers import MOV, MP4, container_of
from shared.db import session_scope
from shared.errors import ConflictError, GoneError, RangeNotSatisfiableError, RequestInvalidError, StillsNotReadyError
from shared.options import JobOptions
from shared.settings import Settings
from shared.states import JobStatus
from shared.storage import Storage
from shared.tenants import owned_job

router = APIRouter(prefix="/v1/jobs", tags=["output"])

_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})")
_BLOCK = 1 << 20
_VIDEO = {"schema": {"type": "string", "format": "binary"}}
# Binary answers are described under their own type and under ``application/octet-stream`` (the same bytes, sent with
# that type to a client that accepts only it): generators that keep only octet-stream bodies then keep the route.
OCTETS = "application/octet-stream"


def binary_type(request: Request, media_type: str) -> str:
    """``media_type``, or ``application/octet-stream`` for a client that accepts only that."""
    accept = request.headers.get("accept", "").split(";")[0].strip().lower()
    return OCTETS if accept == OCTETS else media_type


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``(first, last)`` bytes (inclusive) of a single-range ``Range`` header; ``None`` for the whole file.

    A header this server does not serve (several ranges, another unit, bad syntax) is ignored, as RFC 9110
    allows: the answer is then the whole file.

    >>> byte_range("bytes=0-99", 1000), byte_range("bytes=900-", 1000), byte_range("bytes=-10", 1000)
    ((0, 99), (900, 999), (990, 999))

    Raises:
        RangeNotSatisfiableError: the range starts past the end of the file.
    """
    match = _RANGE.fullmatch(header.strip()) if header else None
    if match is None or match.groups() == ("", ""):
        return None
    first, last = match.groups()
    if not first:  # the last N bytes
        count = int(last)
        if count == 0 or size == 0:
            raise RangeNotSatisfiableError(f"no bytes in the range {header!r}", size=size)
        return max(size - count, 0), size - 1
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        raise RangeNotSatisfiableError(f"the range {header!r} starts past the end ({size} bytes)", size=size)
    return start, min(end, size - 1)


def _blocks(storage: Storage, url: str, start: int, length: int) -> Iterator[bytes]:
    with storage.open_read(url) as handle:
        handle.seek(start)
        left = length
        while left > 0 and (block := handle.read(min(_BLOCK, left))):
            left -= len(block)
            yield block


@router.get(
    "/{job_id}/output",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The whole video",
            "content": {MP4.media_type: _VIDEO, MOV.media_type: _VIDEO, OCTETS: _VIDEO},
        },
        206: {
            "description": "The requested byte range (`Content-Range` says which)",
            "content": {MP4.media_type: _VIDEO, MOV.media_type: _VIDEO, OCTETS: _VIDEO},
        },
        **error_responses(404, 409, 410, 416),
    },
)
def get_output(
    request: Request,
    caller: Caller,
    job_id: Annotated[str, PathParam(description="The job's id", examples=[JOB_ID_EXAMPLE])],
    range_header: Annotated[
        str | None,
        Header(alias="Range", max_length=100, description="One byte range, e.g. `bytes=1048576-` to resume"),
    ] = None,
) -> StreamingResponse:
    """The finished video (MP4; QuickTime MOV from the prores_ks encoder), streamed; a ``Range`` header gets that
    part (206), e.g. to resume a download."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        if job.expired_at is not None:
            raise GoneError(f"job {job_id}: the output was deleted after the retention time")
        if job.status != JobStatus.SUCCEEDED or job.output_url is None:
            raise ConflictError(f"job {job_id} is {job.status}, no output yet", code="output_not_ready")
        url, name = job.output_url, Path(job.target_name).stem or "output"
        container = container_of(JobOptions.model_validate(job.options).encoder.encoder)
    storage: Storage = request.app.state.storage
    try:
        size = storage.size(url)
    except FileNotFoundError as exc:  # expired between the read above and now
        raise GoneError(f"job {job_id}: the output was deleted after the retention time") from exc
    span = byte_range(range_header, size)
    start, end = span if span is not None else (0, size - 1)
    safe = "".join(c if (c.isascii() and c.isalnum()) or c in "-_." else "_" for c in name)[:100]
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(end - start + 1),
        "Content-Disposition": f'attachment; filename="{safe}-swapped{container.extension}"',
    }
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return StreamingResponse(
        _blocks(storage, url, start, end - start + 1),
        status_code=206 if span is not None else 200,
        media_type=binary_type(request, container.media_type),
        headers=headers,
    )


STILL_NAME = r"^[0-9]{2}-(before|after)\.jpg$"
_JPEG = {"schema": {"type": "string", "format": "binary"}}


class StillView(BaseModel):
    frame: int = Field(description="The frame's number in the output (a preview's: in the input), from 0")
    seconds: float
    before: str = Field(description="The input's frame: a name for `GET /v1/jobs/{job_id}/stills/{name}`")
    after: str = Field(description="The rendered frame")


class StillList(BaseModel):
    preview: bool = Field(description="Stills of the preview's frames (the job awaits approval), not of the output")
    stills: list[StillView]


@router.get("/{job_id}/stills", response_model=StillList, responses=error_responses(404))
def list_stills(
    request: Request, caller: Caller, job_id: Annotated[str, PathParam(description="The job's id")]
) -> StillList:
    """The job's before/after stills: of its preview while it awaits approval, of the output once it succeeded
    (none before, or when they could not be made)."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        owned_job(session, caller, job_id)
    storage: Storage = request.app.state.storage
    try:
        with storage.open_read(storage.job_url(job_id, "stills", "stills.json")) as handle:
            manifest = json.loads(handle.read(64 * 1024))
        found = [
            StillView(frame=int(s["frame"]), seconds=float(s["seconds"]), before=s["before"], after=s["after"])
            for s in manifest.get("stills", [])
            if re.match(STILL_NAME, str(s.get("before", ""))) and re.match(STILL_NAME, str(s.get("after", "")))
        ]
        return StillList(preview=bool(manifest.get("preview", False)), stills=found)
    except (OSError, ValueError, KeyError, TypeError):
        return StillList(preview=False, stills=[])


@router.get(
    "/{job_id}/stills/{name}",
    response_class=StreamingResponse,
    responses={
        200: {"description": "The still (JPEG)", "content": {"image/jpeg": _JPEG, OCTETS: _JPEG}},
        **error_responses(404, 409),
    },
)
def get_still(
    request: Request,
    caller: Caller,
    job_id: Annotated[str, PathParam(description="The job's id", examples=[JOB_ID_EXAMPLE])],
    name: Annotated[str, PathParam(max_length=32, description="A still's name from the job's still list")],
) -> StreamingResponse:
    """One before/after still (JPEG)."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        owned_job(session, caller, job_id)
    if not re.match(STILL_NAME, name):
        raise RequestInvalidError("name: a still's name from the job's still list, e.g. 00-before.jpg")
    storage: Storage = request.app.state.storage
    url = storage.job_url(job_id, "stills", name)
    try:
        size = storage.size(url)
    except FileNotFoundError as exc:
        raise StillsNotReadyError(f"job {job_id} has no still {name} (yet)") from exc
    return StreamingResponse(
        _blocks(storage, url, 0, size),
        media_type=binary_type(request, "image/jpeg"),
        headers={"Content-Length": str(size)},
    )
