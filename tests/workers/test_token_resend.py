"""A render message is a token: the worker renders the fairest queued chunk and sends the chunk the message named a
message of its own again. When the broker is away at that moment, the chunk it claimed is still rendered once,
and the named chunk stays queued for the reaper to re-send (it once stayed claimed, unrendered, until its lease
ran out, and rendered a second time). The steps run in-process; the dispatcher is the seam to the broker."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import select

from api.app import create_app
from shared.db import session_scope
from shared.models import Chunk
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import PLAN, RENDER_CHUNK
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key
from workers.runtime import Runtime
from workers.steps import run_step


class Broker:
    """The broker's side of the dispatcher: records what is sent, or refuses it as an unreachable Redis does."""

    def __init__(self) -> None:
        self.away = False
        self.sent: list[tuple[str, str | None]] = []

    def send(
        self, task: str, payload: BaseModel, *, queue: str, countdown: float | None = None, priority: int | None = None
    ) -> None:
        if self.away:
            raise ConnectionRefusedError(111, "Connection refused")
        self.sent.append((task, payload.model_dump().get("chunk_id")))


def test_a_broker_away_when_the_named_chunk_is_sent_again_leaves_the_claimed_chunk_rendered_once(
    settings: Settings, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=2, size="64x64", audio=False)
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as client:
        response = client.post(
            "/v1/jobs",
            files={"target": (clip.name, clip.read_bytes(), "video/mp4")},
            data={"options": json.dumps({"processors": ["passthrough"], "chunk_frames": 16})},
        )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    broker = Broker()
    rt = Runtime(
        settings=settings, storage=Storage(settings.storage_url), dispatcher=broker, hostname="w@test", family="cpu"
    )
    run_step(rt, PLAN, {"job_id": job_id})
    with session_scope(settings.database_url) as session:
        chunks = list(session.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))
        first, named = chunks[0].id, chunks[-1].id
    assert len(chunks) >= 2

    broker.away = True
    run_step(rt, RENDER_CHUNK, {"job_id": job_id, "chunk_id": named})  # the fairest chunk is the first

    with session_scope(settings.database_url) as session:
        by_id = {c.id: c for c in session.scalars(select(Chunk).where(Chunk.job_id == job_id))}
        assert (by_id[first].status, by_id[first].attempts) == ("done", 1)
        assert (by_id[named].status, by_id[named].attempts) == ("queued", 0)
