"""The API's resources: one schema each, with examples; error bodies have their own, documented per status."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.events import EventKind
from shared.options import JobOptions
from shared.states import ChunkStatus, JobStatus
from shared.tasks import ADMIN_PRIORITY, DEFAULT_PRIORITY, MIN_PRIORITY
from shared.webhooks import MAX_URL_LENGTH

JOB_ID_EXAMPLE = "3f2a9c0e5b7d4e1f8a6b2c4d9e0f1a2b"
CALLBACK_DESCRIPTION = (
    "An https URL the farm POSTs `job.succeeded`, `job.failed` or `job.cancelled` to when the job ends, signed per "
    "the Standard Webhooks spec (secret: `GET /v1/webhooks/secret`); retried with back-off for a day. Refused when "
    "its host resolves to a loopback, link-local or private address (callback_url_forbidden)"
)


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable machine-readable code", examples=["media_not_video"])
    message: str = Field(description="What went wrong, for people", examples=["the target has no video stream"])


class ErrorBody(BaseModel):
    """Every error answers with this body; ``error.code`` is stable (see ``shared/errors.py``)."""

    error: ErrorDetail


# The codes each status may carry, documented once and attached to the routes that can answer them.
_ERROR_CODES: dict[int, tuple[str, list[str]]] = {
    401: ("No API key, or an unknown or revoked one", ["unauthorized"]),
    403: ("The key lacks the admin scope", ["forbidden"]),
    404: ("No such job, or the job belongs to another tenant", ["not_found"]),
    408: (
        "The upload stopped sending for longer than the read timeout, or the body did not arrive in time",
        ["upload_timeout", "body_timeout"],
    ),
    409: (
        "The request conflicts with the job's state or an earlier request",
        [
            "job_not_cancellable",
            "job_not_retryable",
            "job_not_pausable",
            "job_not_resumable",
            "job_not_awaiting_approval",
            "output_not_ready",
            "idempotency_conflict",
            "worker_not_quarantined",
        ],  # fmt: skip
    ),
    410: ("The job's files were deleted after the retention time", ["output_expired", "job_expired"]),
    413: (
        "Over a size limit, refused while the upload streamed",
        ["upload_too_large", "source_too_large", "audio_too_large", "request_too_large"],
    ),
    416: ("The Range header is outside the file", ["range_not_satisfiable"]),
    422: (
        "Invalid input, with a stable code",
        [
            "request_invalid",
            "options_invalid",
            "media_unreadable",
            "media_not_video",
            "media_too_long",
            "resolution_too_large",
            "too_many_frames",
            "source_invalid",
            "too_many_sources",
            "callback_url_invalid",
            "callback_url_forbidden",
            "input_url_invalid",
            "input_url_forbidden",
            "input_missing",
            "media_format_refused",
            "media_metadata_invalid",
            "media_duration_invalid",
            "media_rate_invalid",
            "source_resolution_too_large",
            "audio_unreadable",
            "audio_too_long",
        ],
    ),
    429: (
        "Over a quota of the tenant or the API key; try again later",
        ["too_many_waiting_jobs", "storage_quota_exceeded", "too_many_streams", "too_many_uploads"],
    ),
    503: ("The database or the broker is unavailable; try again", ["service_unavailable"]),
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for the error statuses a route can answer, with their codes as examples."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in sorted({401, 422, 503, *statuses}):
        description, codes = _ERROR_CODES[status]
        examples = {code: {"value": {"error": {"code": code, "message": "…"}}} for code in codes}
        responses[status] = {
            "model": ErrorBody,
            "description": f"{description}. Codes: {', '.join(codes)}.",
            "content": {"application/json": {"examples": examples}},
        }
    return responses


class ProgressView(BaseModel):
    frames_done: int = Field(examples=[1200])
    frames_total: int | None = Field(description="Known once the job is planned", examples=[5400])
    percent: float = Field(examples=[22.2])
    frames_per_second: float | None = Field(
        None, description="The farm's measured rate on this job, while it renders", examples=[61.5]
    )
    eta_seconds: float | None = Field(
        None, description="Time left at the measured rate; null while recovering", examples=[68.3]
    )
    recovering: bool = Field(
        False,
        description=(
            "The job waits on a recovery: a worker stopped heartbeating, its work was re-queued or re-sent, or the "
            "broker does not answer. Its progress says nothing about when it ends until a worker takes its work again"
        ),
    )


class ChunkCounts(BaseModel):
    total: int = Field(examples=[18])
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    held: int = Field(0, description="A previewed job's chunks waiting for the preview's approval")


class JobView(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": JOB_ID_EXAMPLE,
                    "status": "rendering",
                    "priority": 5,
                    "progress": {
                        "frames_done": 1200,
                        "frames_total": 5400,
                        "percent": 22.2,
                        "frames_per_second": 61.5,
                        "eta_seconds": 68.3,
                        "recovering": False,
                    },
                    "chunks": {"total": 18, "queued": 12, "running": 2, "done": 4, "failed": 0, "cancelled": 0},
                    "error": None,
                    "target_name": "interview.mp4",
                    "tenant": "studio-a",
                    "retries": 0,
                    "created_at": "2026-11-29T10:00:00Z",
                    "started_at": "2026-11-29T10:00:02Z",
                    "finished_at": None,
                    "output_expires_at": None,
                    "expired": False,
                    "callback_url": "https://hooks.example.com/swapfarm",
                }
            ]
        }
    )

    id: str
    status: JobStatus = Field(
        description="waiting: for the tenant's limit of jobs running at once; paused: until resumed; "
        "awaiting_approval: its preview is rendered, approve or reject it"
    )
    priority: int = Field(
        ge=MIN_PRIORITY, le=ADMIN_PRIORITY, description="0 lowest … 9 most urgent; 10: the admin band (farm-wide)"
    )
    progress: ProgressView
    chunks: ChunkCounts
    error: ErrorDetail | None
    target_name: str
    tenant: str | None = Field(description="The owning tenant's name")
    retries: int = Field(description="Times the job was retried after failing")
    wait_reason: str | None = Field(
        None, description="Why a job that could run waits: no_worker_with_tags (no live worker has its required_tags)"
    )
    group_id: str | None = Field(None, description="The group a batch submission made it in (/v1/groups)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    output_expires_at: datetime | None = Field(description="When the job's files will be deleted")
    expired: bool = Field(description="The job's files were deleted after the retention time")
    callback_url: str | None = Field(None, description="Where the job's end is announced (signed webhooks)")


class JobList(BaseModel):
    jobs: list[JobView]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page")


class ChunkView(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "index": 3,
                    "frame_start": 900,
                    "frame_end": 1200,
                    "status": "done",
                    "attempts": 2,
                    "frames_done": 300,
                    "worker": "cuda-4121@gpu-7",
                    "error": {"code": "worker_lost", "message": "worker cuda-88@gpu-2 stopped heartbeating"},
                    "started_at": "2026-11-29T10:01:10Z",
                    "finished_at": "2026-11-29T10:01:16Z",
                    "render_seconds": 5.9,
                }
            ]
        }
    )

    index: int
    frame_start: int
    frame_end: int = Field(description="Exclusive")
    status: ChunkStatus
    attempts: int = Field(description="Render attempts so far, retries of the job included")
    frames_done: int
    worker: str | None = Field(description="The worker of the latest attempt")
    error: ErrorDetail | None = Field(description="The latest failed attempt's error")
    started_at: datetime | None
    finished_at: datetime | None
    render_seconds: float | None


class ChunkList(BaseModel):
    chunks: list[ChunkView]
    next_after: int | None = Field(
        None, description="Pass as `after` for the next page (the last index of this one); null on the last page"
    )


class EventView(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": 42,
                    "at": "2026-11-29T10:01:10Z",
                    "kind": "chunk_failed",
                    "status": None,
                    "chunk_index": 3,
                    "attempt": 1,
                    "worker": "cuda-88@gpu-2",
                    "error_code": "ffmpeg_failed",
                    "message": "encode exited with 1 (will retry)",
                }
            ]
        }
    )

    id: int
    at: datetime
    kind: EventKind
    status: JobStatus | None = Field(description="The job's state after the event, when it changed")
    chunk_index: int | None
    attempt: int | None
    worker: str | None
    error_code: str | None
    message: str


class EventList(BaseModel):
    events: list[EventView]
    next_after: int | None = Field(description="Pass as `after` for the next page; null when there is none yet")


class Health(BaseModel):
    status: str = Field(examples=["ok"])
    checks: dict[str, str] = Field(default_factory=dict, examples=[{"database": "ok", "broker": "ok"}])


class InputRef(BaseModel):
    """An input the farm reads itself, from a URL under a prefix its operator allows."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1,
        max_length=MAX_URL_LENGTH,
        description="`s3://` (or `file://`) URL under one of the prefixes the operator allows "
        "(`SWAPFARM_INPUT_URL_PREFIXES`); the file is copied into the job",
        examples=["s3://media/clips/interview.mp4"],
    )
    name: str | None = Field(
        None, min_length=1, max_length=255, description="The file's name for people; default: the URL's last part"
    )


class JobRequest(BaseModel):
    """A job whose inputs are already in storage the farm can read (``POST /v1/jobs`` with a JSON body)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "target": {"url": "s3://media/clips/interview.mp4"},
                    "sources": [{"url": "s3://media/faces/actor.jpg"}],
                    "options": {"processors": ["face_swapper"], "preset": "quality"},
                    "priority": 7,
                    "callback_url": "https://hooks.example.com/swapfarm",
                }
            ]
        },
    )

    target: InputRef = Field(description="The video whose faces are processed")
    sources: list[InputRef] = Field(default_factory=list, max_length=64, description="Source face image(s)")
    source_audio: InputRef | None = Field(
        None, description="The audio the mouths follow (lip_syncer): WAV, FLAC, MP3, AAC/M4A or Opus/Vorbis in Ogg"
    )
    options: JobOptions = Field(default_factory=JobOptions)
    priority: int = Field(
        DEFAULT_PRIORITY,
        ge=MIN_PRIORITY,
        le=ADMIN_PRIORITY,
        description="0 lowest … 9 most urgent among your own jobs; 10, the farm-wide urgent band, needs an admin key",
    )
    callback_url: str | None = Field(None, max_length=MAX_URL_LENGTH, description=CALLBACK_DESCRIPTION)


# The body of POST /v1/jobs, documented by hand: the endpoint parses the stream itself (see ``api.uploads``), so
# FastAPI cannot derive it from parameters. ``options`` is a JSON part typed by the JobOptions schema (OpenAPI's
# per-part ``encoding``), so generated clients know every option; the components come from ``api.openapi``.
SUBMISSION_BODY: dict[str, Any] = {
    "required": True,
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["target"],
                "properties": {
                    "target": {
                        "type": "string",
                        "format": "binary",
                        "description": "The video whose faces are processed",
                    },
                    "source": {
                        "type": "array",
                        "items": {"type": "string", "format": "binary"},
                        "description": "Source face image(s), repeated as one part each",
                    },
                    "source_audio": {
                        "type": "string",
                        "format": "binary",
                        "description": "The audio the mouths follow (lip_syncer): WAV, FLAC, MP3, AAC/M4A or "
                        "Opus/Vorbis in Ogg",
                    },
                    "options": {
                        "$ref": "#/components/schemas/JobOptions",
                        "description": "JobOptions, as a JSON part (`Content-Type: application/json` or plain text)",
                    },
                    "priority": {
                        "type": "integer",
                        "minimum": MIN_PRIORITY,
                        "maximum": ADMIN_PRIORITY,
                        "default": DEFAULT_PRIORITY,
                        "description": (
                            "0 lowest … 9 most urgent, among your own jobs: tenants share the workers fairly "
                            "whatever their priorities. 10, the farm-wide urgent band, needs an admin key (else 403)"
                        ),
                    },
                    "callback_url": {
                        "type": "string",
                        "format": "uri",
                        "maxLength": MAX_URL_LENGTH,
                        "description": CALLBACK_DESCRIPTION,
                    },
                },
            },
            "encoding": {"options": {"contentType": "application/json"}},
        },
        "application/json": {"schema": {"$ref": "#/components/schemas/JobRequest"}},
    },
}
# Models the description carries as components although no route parameter names them.
BODY_MODELS: tuple[type[BaseModel], ...] = (JobRequest,)
