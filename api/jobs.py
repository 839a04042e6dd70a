"""``/v1/jobs``: submit a job, read its state, download its output."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from api.schemas import ChunkCounts, ErrorBody, ErrorDetail, JobView, ProgressView
from shared import jobs
from shared.db import session_scope
from shared.errors import ConflictError, InvalidOptionsError, NotFoundError, TooLargeError
from shared.models import Job
from shared.options import JobOptions
from shared.settings import Settings
from shared.states import JobStatus
from shared.storage import copy_stream
from shared.submission import Upload, submit

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such job"},
    422: {"model": ErrorBody, "description": "Invalid input, with a stable error code"},
    503: {"model": ErrorBody, "description": "Database or broker unavailable"},
}


def _parse_options(raw: str) -> JobOptions:
    try:
        data = json.loads(raw or "{}")
        return JobOptions.model_validate(data)
    except (json.JSONDecodeError, ValidationError) as exc:
        message = str(exc).splitlines()[0] if isinstance(exc, json.JSONDecodeError) else _first_error(exc)
        raise InvalidOptionsError(f"options: {message}") from exc


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def _spool(upload: UploadFile, folder: Path, limit: int, what: str) -> Upload:
    local = folder / f"{what}-{len(list(folder.iterdir()))}"
    try:
        with local.open("wb") as out:
            copy_stream(upload.file, out, limit)
    except OverflowError as exc:
        raise TooLargeError(f"{what} is larger than the {limit} byte limit") from exc
    return Upload(path=local, name=upload.filename or what)


def view(job: Job, progress: jobs.Progress) -> JobView:
    total = progress.frames_total
    done = total if job.status == JobStatus.SUCCEEDED and total is not None else progress.frames_done
    return JobView(
        id=job.id,
        status=JobStatus(job.status),
        progress=ProgressView(
            frames_done=done,
            frames_total=total,
            percent=round(100.0 * done / total, 1) if total else 0.0,
        ),
        chunks=ChunkCounts(total=job.chunks_total or 0, **progress.chunks),
        error=ErrorDetail(code=job.error_code, message=job.error_message or "") if job.error_code else None,
        target_name=job.target_name,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def read_job(settings: Settings, job_id: str) -> JobView:
    with session_scope(settings.database_url) as session:
        job = jobs.get_job(session, job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id}")
        return view(job, jobs.progress(session, job))


@router.post("", status_code=202, response_model=JobView, responses={**_ERRORS, 413: {"model": ErrorBody}})
def create_job(
    request: Request,
    target: Annotated[UploadFile, File(description="The video whose faces are processed")],
    source: Annotated[list[UploadFile] | None, File(description="Source face image(s)")] = None,
    options: Annotated[
        str, Form(description="JobOptions as JSON", examples=['{"processors": ["passthrough"]}'])
    ] = "{}",
) -> JobView:
    """Submit a job: stored, inserted and queued; returns at once with the job's id (202)."""
    settings: Settings = request.app.state.settings
    parsed = _parse_options(options)
    folder = Path(tempfile.mkdtemp(prefix="swapfarm-upload-"))
    try:
        target_upload = _spool(target, folder, settings.max_upload_bytes, "target")
        sources = [_spool(s, folder, settings.max_source_bytes, "source") for s in source or []]
        job_id = submit(
            database_url=settings.database_url,
            storage=request.app.state.storage,
            dispatcher=request.app.state.dispatcher,
            target=target_upload,
            sources=sources,
            options=parsed,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return read_job(settings, job_id)


@router.get("/{job_id}", response_model=JobView, responses=_ERRORS)
def get_job(request: Request, job_id: str) -> JobView:
    """A job's state, progress, chunk counts and error."""
    return read_job(request.app.state.settings, job_id)


@router.get(
    "/{job_id}/output",
    response_class=StreamingResponse,
    responses={**_ERRORS, 409: {"model": ErrorBody, "description": "The job has not succeeded"}},
)
def get_output(request: Request, job_id: str) -> StreamingResponse:
    """The finished video (MP4), streamed."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        job = jobs.get_job(session, job_id)
        if job is None:
            raise NotFoundError(f"no job {job_id}")
        if job.status != JobStatus.SUCCEEDED or job.output_url is None:
            raise ConflictError(f"job {job_id} is {job.status}, no output yet", code="output_not_ready")
        url, name = job.output_url, Path(job.target_name).stem or "output"
    storage = request.app.state.storage
    size = storage.size(url)

    def blocks() -> Iterator[bytes]:
        with storage.open_read(url) as handle:
            while block := handle.read(1 << 20):
                yield block

    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:100]
    headers = {
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{safe}-swapped.mp4"',
    }
    return StreamingResponse(blocks(), media_type="video/mp4", headers=headers)
