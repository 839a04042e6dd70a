"""``swapfarm flower`` against the test Redis: basic auth from settings, the workers with their family's queues,
and the chunk tasks of a job with their job ids."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from shared.settings import Settings
from shared.tasks import RENDER_CHUNK, render_queue
from tests.integration.conftest import submit, wait_finished
from tests.support.farm import Farm, settings_env, wait_for
from tests.support.services import answers, free_port
from workers.engines.family import detect_family

pytestmark = pytest.mark.integration

PASSWORD = "flower-test-password"


@pytest.fixture
def settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"flower_user": "ops", "flower_password": SecretStr(PASSWORD)})


def _worker(base: str, hostname: str) -> dict[str, Any] | None:
    response = httpx.get(f"{base}/api/workers", params={"refresh": "1"}, auth=("ops", PASSWORD), timeout=30)
    assert response.status_code == 200, response.text
    found: dict[str, Any] | None = response.json().get(hostname)
    return found if found and found.get("active_queues") else None


def _render_tasks(base: str, job_id: str) -> list[dict[str, Any]]:
    response = httpx.get(
        f"{base}/api/tasks", params={"taskname": RENDER_CHUNK, "state": "SUCCESS"}, auth=("ops", PASSWORD), timeout=30
    )
    assert response.status_code == 200, response.text
    return [task for task in response.json().values() if job_id in str(task.get("kwargs"))]


def test_flower_asks_for_credentials_then_lists_the_worker_and_the_chunk_tasks_of_a_job(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    hostname = farm.worker("w1")
    farm.flower(port)
    wait_for(lambda: answers(f"{base}/healthcheck") == 200, timeout=60, what="Flower")

    assert answers(f"{base}/api/workers") == 401
    assert answers(f"{base}/api/workers", auth=("ops", "wrong")) == 401
    assert answers(f"{base}/api/tasks") == 401

    worker = wait_for(lambda: _worker(base, hostname), timeout=90, what=f"Flower to list {hostname}")
    assert isinstance(worker, dict)
    assert render_queue(detect_family(settings)) in {q["name"] for q in worker["active_queues"]}, "its family's queue"

    job_id = submit(
        api, clip_short, {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}, "chunk_frames": 60}
    )
    assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    tasks = wait_for(lambda: _render_tasks(base, job_id), timeout=30, what="the job's render_chunk tasks in Flower")
    assert isinstance(tasks, list)
    assert {task["worker"] for task in tasks} == {hostname}
    assert all("chunk_id" in str(task["kwargs"]) for task in tasks)


@pytest.mark.parametrize(
    ("user", "password", "why"),
    [
        ("ops", "secret,admin:x", "','"),  # Flower would read "admin:x" as a second login
        ("ops,admin", "secret", "','"),
        ("ops", "change-me", "not a default"),
    ],
)
def test_flower_refuses_credentials_it_would_misread_or_that_are_defaults(
    settings: Settings, user: str, password: str, why: str
) -> None:
    env = {
        **settings_env(settings),
        "SWAPFARM_FLOWER_USER": user,
        "SWAPFARM_FLOWER_PASSWORD": password,
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-m", "cli", "flower", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "settings_invalid" in done.stderr and why in done.stderr, done.stderr
