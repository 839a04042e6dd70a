"""``GET /v1/jobs/{id}/output``: the finished video, streamed from storage, with single-range requests (206)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi import Path as PathParam
from fastapi.responses import StreamingResponse

from api.auth import Caller
from api.schemas import JOB_ID_EXAMPLE, error_responses
from shared.db import session_scope
from shared.errors import ConflictError, GoneError, RangeNotSatisfiableError
from shared.settings import Settings
from shared.states import JobStatus
from shared.storage import Storage
from shared.tenants import owned_job

router = APIRouter(prefix="/v1/jobs", tags=["output"])

_RANGE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})")
_BLOCK = 1 << 20
_VIDEO = {"schema": {"type": "string", "format": "binary"}}


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
        200: {"description": "The whole video", "content": {"video/mp4": _VIDEO}},
        206: {
            "description": "The requested byte range (`Content-Range` says which)",
            "content": {"video/mp4": _VIDEO},
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
    """The finished video (MP4), streamed; a ``Range`` header gets that part (206), e.g. to resume a download."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        if job.expired_at is not None:
            raise GoneError(f"job {job_id}: the output was deleted after the retention time")
        if job.status != JobStatus.SUCCEEDED or job.output_url is None:
            raise ConflictError(f"job {job_id} is {job.status}, no output yet", code="output_not_ready")
        url, name = job.output_url, Path(job.target_name).stem or "output"
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
        "Content-Disposition": f'attachment; filename="{safe}-swapped.mp4"',
    }
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    return StreamingResponse(
        _blocks(storage, url, start, end - start + 1),
        status_code=206 if span is not None else 200,
        media_type="video/mp4",
        headers=headers,
    )
