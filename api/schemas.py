"""The API's resources: one schema each, with examples; error bodies have their own."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from shared.states import JobStatus


class ErrorDetail(BaseModel):
    code: str = Field(examples=["media_not_video"])
    message: str = Field(examples=["the target has no video stream"])


class ErrorBody(BaseModel):
    error: ErrorDetail


class ProgressView(BaseModel):
    frames_done: int = Field(examples=[1200])
    frames_total: int | None = Field(examples=[5400])
    percent: float = Field(examples=[22.2])


class ChunkCounts(BaseModel):
    total: int = Field(examples=[18])
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0


class JobView(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "id": "3f2a9c0e5b7d4e1f8a6b2c4d9e0f1a2b",
                    "status": "rendering",
                    "progress": {"frames_done": 1200, "frames_total": 5400, "percent": 22.2},
                    "chunks": {
                        "total": 18,
                        "queued": 12,
                        "running": 2,
                        "done": 4,
                        "failed": 0,
                        "cancelled": 0,
                    },
                    "error": None,
                    "target_name": "interview.mp4",
                    "created_at": "2026-11-29T10:00:00Z",
                    "started_at": "2026-11-29T10:00:02Z",
                    "finished_at": None,
                }
            ]
        }
    )

    id: str
    status: JobStatus
    progress: ProgressView
    chunks: ChunkCounts
    error: ErrorDetail | None
    target_name: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class Health(BaseModel):
    status: str = Field(examples=["ok"])
    checks: dict[str, str] = Field(default_factory=dict, examples=[{"database": "ok", "broker": "ok"}])
