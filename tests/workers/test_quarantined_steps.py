"""A quarantined worker takes no work: a plan or a stitch it receives goes back to its queue, a heartbeat later, for
another worker, and the job is left as it was. The steps run in-process on a job submitted through the API; the
dispatcher is the seam to the broker."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import func, select

from api.app import create_app
from shared.db import session_scope
from shared.models import Chunk, Job, WorkerPresence, utcnow
from shared.settings import Settings
from shared.states import JobStatus
from shared.storage import Storage
from shared.tasks import PLAN, STITCH
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key
from workers.runtime import Runtime
from workers.steps import run_step


class Sent:
    """What reached the broker's side of the dispatcher: task, job, queue and delay of each message."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str, str, float | None]] = []

    def send(
        self, task: str, payload: BaseModel, *, queue: str, countdown: float | None = None, priority: int | None = None
    ) -> None:
        self.messages.append((task, str(payload.model_dump()["job_id"]), queue, countdown))


def test_a_quarantined_worker_passes_a_plan_and_a_stitch_back_to_their_queues_and_runs_neither(
    settings: Settings, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=1, size="64x64")
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as client:
        response = client.post(
            "/v1/jobs",
            files={"target": (clip.name, clip.read_bytes(), "video/mp4")},
            data={"options": json.dumps({"processors": ["passthrough"]})},
        )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    with session_scope(settings.database_url) as session:
        session.add(
            WorkerPresence(name="q@test", hostname="q", family="cpu", quarantined_at=utcnow(), quarantine_reason="t")
        )
    sent = Sent()
    rt = Runtime(
        settings=settings, storage=Storage(settings.storage_url), dispatcher=sent, hostname="q@test", family="cpu"
    )

    run_step(rt, PLAN, {"job_id": job_id})
    run_step(rt, STITCH, {"job_id": job_id})

    later = settings.heartbeat_seconds
    assert sent.messages == [(PLAN, job_id, "control", later), (STITCH, job_id, "stitch", later)]
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.status == JobStatus.QUEUED and job.frames_total is None
        assert session.scalar(select(func.count()).select_from(Chunk).where(Chunk.job_id == job_id)) == 0
