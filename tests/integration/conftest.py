from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.farm import Farm
from tests.support.farm_pool import FarmPool, PooledFarm
from tests.support.tenants import bearer


@pytest.fixture(scope="module")
def farm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FarmPool]:
    """The processes a ``shared_farm`` module's tests share; stopped after its last test."""
    pool = FarmPool(tmp_path_factory.mktemp("farm-logs"))
    yield pool
    pool.stop()


@pytest.fixture
def farm(request: pytest.FixtureRequest, settings: Settings, tmp_path: Path) -> Iterator[Farm]:
    """The test's farm: its own processes, or in a module marked ``shared_farm`` those of the module's pool (the
    same ``worker``/``beat``/``kill`` calls; a process is reused only when started the same way)."""
    if request.node.get_closest_marker("shared_farm"):
        farm: Farm = PooledFarm(settings, request.getfixturevalue("farm_pool"))
    else:
        logs = tmp_path / "logs"
        logs.mkdir()
        farm = Farm(settings, logs)
    yield farm
    farm.stop()


@pytest.fixture
def api(settings: Settings, api_key: str) -> Iterator[TestClient]:
    """The API in-process, every request carrying the key of a fresh tenant."""
    with TestClient(create_app(settings), headers=bearer(api_key)) as client:
        yield client


def submit(api: TestClient, target: Path, options: dict[str, Any], sources: list[Path] | None = None) -> str:
    files: list[tuple[str, tuple[str, bytes, str]]] = [("target", (target.name, target.read_bytes(), "video/mp4"))]
    files += [("source", (s.name, s.read_bytes(), "image/jpeg")) for s in sources or []]
    response = api.post("/v1/jobs", files=files, data={"options": json.dumps(options)})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def wait_finished(api: TestClient, job_id: str, farm: Farm, timeout: float = 300) -> dict[str, Any]:
    """Poll until the job ends (a guard against hanging, not a speed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").json()
        if body["status"] in {"succeeded", "failed", "cancelled"}:
            return body
        time.sleep(0.3)
    logs = "\n".join(
        f"--- {k}\n{farm.log(k)[-3000:]}" for k in ("w1", "w2", "beat") if (farm.logs / f"{k}.log").exists()
    )
    raise AssertionError(f"job {job_id} did not finish: {body}\n{logs}")


def download(api: TestClient, job_id: str, path: Path) -> Path:
    response = api.get(f"/v1/jobs/{job_id}/output")
    assert response.status_code == 200
    assert response.headers["content-type"] == "video/mp4"
    path.write_bytes(response.content)
    return path


# A processor that touches every pixel on the pipe path (decode → BGR frames → detector → blur → encode): the fault
# and bad-input suites run through it as well as through the one-process passthrough transcode. Plain face_blur:
# one detector run a frame; strict mode's sweep (the frame turned both ways and enlarged: four runs a frame) is what
# tests/integration/test_face_tracks.py proves, on faces.
PLAIN_BLUR: dict[str, Any] = {"blur_strict": False}
BLUR: dict[str, Any] = {"processors": ["face_blur"], "encoder": {"preset": "ultrafast"}, "face": PLAIN_BLUR}


def with_face_models(settings: Settings, data_dir: Path, folder: Path) -> Settings:
    """``settings`` with the real YuNet detector installed offline (what ``face_blur`` needs)."""
    models = folder / "models"
    models.mkdir(parents=True, exist_ok=True)
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    return settings.model_copy(
        update={
            "models_dir": models,
            "model_cache_dir": folder / "model-cache",
            "allow_model_hash_mismatch": True,
            "model_base_urls": [],
        }
    )


def events_of(api: TestClient, job_id: str, kind: str | None = None) -> list[dict[str, Any]]:
    """The job's event log (every page), or its events of one ``kind``."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = api.get(f"/v1/jobs/{job_id}/events", params={"after": after}).json()
        found += page["events"]
        if not page["events"]:
            return [e for e in found if kind is None or e["kind"] == kind]
        after = page["next_after"]
