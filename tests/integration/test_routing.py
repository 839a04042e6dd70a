"""Accelerator families for real: a job that asks for a family is rendered only by a worker of that family."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shared.broker import make_celery, queue_depths
from shared.db import session_scope
from shared.models import Chunk
from shared.settings import Settings
from shared.tasks import render_queue
from tests.integration.conftest import submit, wait_finished
from tests.support.farm import Farm, wait_for

pytestmark = pytest.mark.integration

PASSTHROUGH = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}, "chunk_frames": 40}


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def test_a_cuda_job_waits_for_a_cuda_worker_while_cpu_workers_run_other_families(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path
) -> None:
    farm.worker("w1", env={"SWAPFARM_FAMILY": "cpu"})
    job_id = submit(api, clip_short, {**PASSTHROUGH, "family": "cuda"})
    wait_for(lambda: _chunks(settings, job_id), timeout=60, what="the job's plan (made by the cpu worker)")
    cpu_job = submit(api, clip_short, {**PASSTHROUGH, "family": "cpu"})
    assert wait_finished(api, cpu_job, farm)["status"] == "succeeded"  # the cpu worker is alive and rendering
    celery = make_celery(settings)
    try:  # the cpu worker has taken every message of its queues; the cuda job's are all still waiting
        expected = {
            render_queue("cpu"): 0,
            render_queue("any"): 0,
            render_queue("cuda"): len(_chunks(settings, job_id)),
        }
        wait_for(
            lambda: {q: queue_depths(celery)[q] for q in expected} == expected,
            timeout=60,
            what=f"queue depths {expected}",
        )
    finally:
        celery.close()
    waiting = _chunks(settings, job_id)
    assert {(c.status, c.worker, c.attempts) for c in waiting} == {("queued", None, 0)}
    assert api.get(f"/v1/jobs/{job_id}").json()["status"] not in {"succeeded", "failed"}

    # forced, with the CPU provider chosen explicitly (else a CUDA worker without a GPU takes no render work)
    cuda_env = {"SWAPFARM_FAMILY": "cuda", "SWAPFARM_EXECUTION_PROVIDERS": '["CPUExecutionProvider"]'}
    cuda_worker = farm.worker("w2", env=cuda_env)
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    rendered = _chunks(settings, job_id)
    assert {(c.status, c.worker, c.family) for c in rendered} == {("done", cuda_worker, "cuda")}
    assert {c.family for c in _chunks(settings, cpu_job)} == {"cpu"}
