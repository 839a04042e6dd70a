"""``/v1/workers``: an admin releases a quarantined worker (``shared.worker_health``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from api.auth import Caller
from api.schemas import error_responses
from shared.worker_health import release_worker

router = APIRouter(prefix="/v1/workers", tags=["workers"])

WorkerName = Annotated[
    str,
    PathParam(
        description="The worker's name (Celery's node name)", pattern=r"^[A-Za-z0-9@._%+-]{1,255}$",
        examples=["cpu-4121@gpu-7"],
    ),
]  # fmt: skip


class Released(BaseModel):
    name: str
    released: bool = Field(description="The worker takes work again")


@router.post("/{name}/release", response_model=Released, responses=error_responses(403, 404, 409))
def release(request: Request, caller: Caller, name: WorkerName) -> Released:
    """Admin keys only: release a quarantined worker (one that failed chunks of several jobs within the window);
    it takes work again. A worker that is not quarantined answers 409 ``worker_not_quarantined``."""
    release_worker(request.app.state.settings, caller, name)
    return Released(name=name, released=True)
