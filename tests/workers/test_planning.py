"""What a job writes is checked again when it is planned, from the frames the file holds: a header that says
fewer frames (or none, or a shorter duration) gets a job accepted, and the planner fails it with the limit's code
before any chunk is made. The plan step runs in-process, on a job submitted through the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared.db import session_scope
from shared.media import probe
from shared.models import Chunk, Job
from shared.settings import Settings
from shared.storage import Storage
from tests.shared.test_control import Recorder
from tests.support import hostile
from tests.support.tenants import bearer, make_key
from workers.planning import plan
from workers.runtime import Runtime


@pytest.fixture(scope="module")
def lying(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """60 frames at 30 fps (2 s, 160x90) in Matroska, whose header claims 1 s and declares no frame count."""
    clip = hostile.mkv_claiming(tmp_path_factory.mktemp("lying") / "claims-a-second.mkv", seconds=2, claimed_seconds=1)
    media = probe(clip)
    assert media.frame_count is None and media.duration == pytest.approx(1.0), media
    return clip


@dataclass(frozen=True)
class Planned:
    status: str
    error_code: str | None
    frames_total: int | None
    chunks: int  # rows made


def _planned(settings: Settings, clip: Path, options: dict[str, Any]) -> Planned:
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as client:
        response = client.post(
            "/v1/jobs",
            files={"target": (clip.name, clip.read_bytes(), "video/x-matroska")},
            data={"options": json.dumps(options)},
        )
    assert response.status_code == 202, response.text  # the header's 30 frames are within the limits
    job_id = response.json()["id"]
    rt = Runtime(
        settings=settings, storage=Storage(settings.storage_url), dispatcher=Recorder(), hostname="p", family="cpu"
    )
    plan(job_id, rt)
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_id)
        assert job is not None
        chunks = session.scalar(select(func.count()).select_from(Chunk).where(Chunk.job_id == job_id)) or 0
        return Planned(job.status, job.error_code, job.frames_total, chunks)


@pytest.mark.parametrize(
    ("options", "limits", "code"),
    [
        # the header's 1 s at 60 fps is 60 frames; the file's 2 s are 120, over 100
        ({"output_fps": 60}, {"max_frames": 100}, "too_many_frames"),
        # 30 frames of 320x180 by the header, 60 in the file: 3.5 M pixels, over 3 M
        ({"output_height": 180}, {"max_output_pixels": 3_000_000}, "resolution_too_large"),
    ],
    ids=["output-frames", "output-pixels"],
)
def test_a_job_over_a_limit_by_what_the_file_holds_fails_at_planning(
    settings: Settings, lying: Path, options: dict[str, Any], limits: dict[str, int], code: str
) -> None:
    job = _planned(settings.model_copy(update=limits), lying, {"processors": ["passthrough"], **options})
    assert (job.status, job.error_code) == ("failed", code), job
    assert job.chunks == 0, "nothing was planned"


def test_the_same_job_within_the_limits_is_planned(settings: Settings, lying: Path) -> None:
    job = _planned(
        settings.model_copy(update={"max_frames": 120}), lying, {"processors": ["passthrough"], "output_fps": 60}
    )
    assert job.status == "rendering" and job.error_code is None
    assert job.frames_total == 60 and job.chunks >= 1
