"""Job control on the real farm: cancel mid-render, retry after a failure, priorities, a tenant's limit of jobs
running at once, and the CLI client against a real API server."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from shared.db import session_scope
from shared.models import Chunk
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm, settings_env, wait_for
from tests.support.faults import failing_encoder
from tests.support.live import live_api
from tests.support.media import assert_frames_match, make_clip, read_frames
from tests.support.tenants import bearer, make_key

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]
logger = logging.getLogger(__name__)

LOSSLESS: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _files(settings: Settings, job_id: str) -> list[Path]:
    root = Path(settings.storage_url.removeprefix("file://")) / "jobs" / job_id
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def _log_time(farm: Farm, worker: str, *needles: str) -> float | None:
    """When the worker logged a line containing every needle (its JSON log's time), as a Unix time."""
    for line in farm.log(worker).splitlines():
        if line.startswith("{") and all(n in line for n in needles):
            return datetime.fromisoformat(json.loads(line)["time"]).timestamp()
    return None


def test_cancel_mid_render_stops_the_worker_within_a_batch_and_leaves_no_chunk_behind(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "hd.mp4", seconds=6, size="1280x720")
    farm.worker("w1")
    # The slowest x264 preset makes each chunk last seconds (several heartbeats), however fast the machine.
    slow = {**LOSSLESS, "encoder": {"lossless": True, "preset": "veryslow"}, "chunk_frames": 90}
    job_id = submit(api, clip, slow)

    def rendering() -> Chunk | None:
        return next((c for c in _chunks(settings, job_id) if c.status == "running" and c.frames_done > 0), None)

    chunk = wait_for(rendering, timeout=120, what="a chunk with frames rendered")
    assert isinstance(chunk, Chunk) and chunk.started_at is not None
    rate = chunk.frames_done / max(time.time() - chunk.started_at.timestamp(), 1e-3)  # frames/s, roughly
    batch = settings.batch_size / rate
    progress = api.get(f"/v1/jobs/{job_id}").json()["progress"]
    assert progress["frames_per_second"] > 0 and progress["eta_seconds"] > 0, progress  # measured while rendering
    chunks = api.get(f"/v1/jobs/{job_id}/chunks").json()["chunks"]
    assert {(c["status"], c["worker"], c["attempts"]) for c in chunks if c["index"] == chunk.index} == {
        ("running", "w1@test", 1)
    }
    cancelled_at = time.time()
    response = api.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"

    stopped = wait_for(lambda: _log_time(farm, "w1", chunk.id, "lease lost"), timeout=30, what="the render to stop")
    assert isinstance(stopped, float)
    logger.info("cancel: the worker stopped %.2fs after the cancel (batch ~%.2fs)", stopped - cancelled_at, batch)
    # The worker checks between batches; it learns of the cancel at its next heartbeat.
    assert stopped - cancelled_at <= settings.heartbeat_seconds + batch + 1.0, (stopped - cancelled_at, batch)
    assert _files(settings, job_id) == [], "no chunk output (nor input) of a cancelled job remains"
    assert {c.status for c in _chunks(settings, job_id)} <= {"cancelled", "done"}

    other = submit(api, clip_short, {**LOSSLESS, "chunk_frames": 60})
    assert wait_finished(api, other, farm)["status"] == "succeeded", "the worker goes on with other jobs"
    assert _files(settings, job_id) == []
    kinds = [e["kind"] for e in api.get(f"/v1/jobs/{job_id}/events").json()["events"]]
    assert kinds[-1] == "cancelled"


def test_retry_after_an_injected_chunk_failure_renders_only_that_chunk_again(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    switch = tmp_path / "encoder-broken"
    farm.worker("w1", env=failing_encoder(tmp_path / "bin", chunk_index=3, switch=switch))
    job_id = submit(api, clip_short, {**LOSSLESS, "chunk_frames": 30})  # 4 chunks; the last one fails
    failed = wait_finished(api, job_id, farm)
    assert failed["status"] == "failed", failed
    assert "injected fault" in failed["error"]["message"]
    before = {c.index: (c.status, c.attempts) for c in _chunks(settings, job_id)}
    assert before == {0: ("done", 1), 1: ("done", 1), 2: ("done", 1), 3: ("failed", settings.max_attempts)}

    switch.unlink()  # the encoder is mended
    retried = api.post(f"/v1/jobs/{job_id}/retry")
    assert retried.status_code == 202 and retried.json()["retries"] == 1, retried.text
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    after = {c.index: (c.status, c.attempts) for c in _chunks(settings, job_id)}
    assert after == {0: ("done", 1), 1: ("done", 1), 2: ("done", 1), 3: ("done", settings.max_attempts + 1)}
    assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip_short))

    events = api.get(f"/v1/jobs/{job_id}/events").json()["events"]
    failures = [e for e in events if e["kind"] == "chunk_failed"]
    assert [(e["chunk_index"], e["attempt"], e["worker"]) for e in failures] == [
        (3, n, "w1@test") for n in range(1, settings.max_attempts + 1)
    ]
    assert all("injected fault" in e["message"] for e in failures)
    started = [(e["chunk_index"], e["attempt"]) for e in events if e["kind"] == "chunk_started"]
    assert started.count((3, settings.max_attempts + 1)) == 1 and len(started) == 3 + settings.max_attempts + 1
    kinds = [e["kind"] for e in events]
    assert kinds.index("failed") < kinds.index("retried") < kinds.index("succeeded")


def test_the_queues_serve_the_more_urgent_job_first(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path
) -> None:
    farm.worker("control", queues="control,stitch")  # plans both jobs; nothing renders yet
    low = submit_with_priority(api, clip_short, 1, chunk_frames=20)
    high = submit_with_priority(api, clip_short, 9, chunk_frames=40)
    wait_for(
        lambda: all(api.get(f"/v1/jobs/{j}").json()["status"] == "rendering" for j in (low, high)),
        timeout=60,
        what="both jobs planned",
    )
    farm.worker("render", queues="render.cpu,render.any")
    for job_id in (low, high):
        assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    low_starts = [c.started_at for c in _chunks(settings, low) if c.started_at]
    high_starts = [c.started_at for c in _chunks(settings, high) if c.started_at]
    assert len(low_starts) == 6 and len(high_starts) == 3
    assert max(high_starts) < min(low_starts), "every chunk of the urgent job before any of the other"


def submit_with_priority(api: TestClient, clip: Path, priority: int, *, chunk_frames: int) -> str:
    response = api.post(
        "/v1/jobs",
        files={"target": (clip.name, clip.read_bytes(), "video/mp4")},
        data={"options": json.dumps({**LOSSLESS, "chunk_frames": chunk_frames}), "priority": str(priority)},
    )
    assert response.status_code == 202, response.text
    assert response.json()["priority"] == priority
    return str(response.json()["id"])


def test_a_tenant_at_its_limit_waits_and_its_jobs_run_one_after_another_in_order(
    farm: Farm, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings, max_running_jobs=1)
    farm.worker("w1")
    with TestClient(create_app(settings), headers=bearer(key)) as api:
        ids = [submit(api, clip_short, {**LOSSLESS, "chunk_frames": 60}) for _ in range(3)]
        assert [api.get(f"/v1/jobs/{j}").json()["status"] for j in ids[1:]] == ["waiting", "waiting"]
        for job_id in ids:
            assert wait_finished(api, job_id, farm)["status"] == "succeeded"
        spans = []
        for job_id in ids:
            events = api.get(f"/v1/jobs/{job_id}/events").json()["events"]
            admitted = next(e["at"] for e in events if e["kind"] == "admitted")
            finished = next(e["at"] for e in events if e["kind"] == "succeeded")
            spans.append((datetime.fromisoformat(admitted), datetime.fromisoformat(finished)))
    for (_, finished), (admitted, _) in zip(spans, spans[1:], strict=False):
        assert finished <= admitted, "a job runs only once the one before it has ended"


def test_the_cli_submits_watches_lists_and_downloads(
    farm: Farm, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    key = make_key(settings)
    farm.worker("w1")
    with live_api(settings, farm.logs) as server:
        env = {**settings_env(settings), "SWAPFARM_API_URL": server.url, "SWAPFARM_API_KEY": key, "COLUMNS": "80"}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True, timeout=300
            )

        options = json.dumps({**LOSSLESS, "chunk_frames": 60})
        submitted = cli("submit", str(clip_short), "--options", options, "--priority", "7", "--watch")
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split()[0]
        assert f"{job_id} succeeded 100.0%" in submitted.stdout
        assert "frames" in submitted.stderr  # the live bar drew on stderr

        listed = cli("list")  # 80 columns, in a pipe: the id stays whole
        assert listed.returncode == 0 and job_id in listed.stdout.split() and "succeeded" in listed.stdout
        status = cli("status", job_id, "--chunks")
        assert status.returncode == 0 and "w1@test" in status.stdout.split()
        assert [j["id"] for j in json.loads(cli("list", "--json").stdout)["jobs"]] == [job_id]
        as_json = json.loads(cli("status", job_id, "--chunks", "--json").stdout)
        assert as_json["job"]["status"] == "succeeded" and len(as_json["chunks"]) == as_json["job"]["chunks"]["total"]
        out = tmp_path / "out.mp4"
        fetched = cli("download", job_id, "-o", str(out))
        assert fetched.returncode == 0, fetched.stderr
        assert_frames_match(read_frames(out), read_frames(clip_short))

        missing = cli("status", "0" * 32)
        assert missing.returncode == 1 and "not_found" in missing.stderr
        unauthorized = cli("list", "--key", "sfk_wrong")
        assert unauthorized.returncode == 1 and "unauthorized" in unauthorized.stderr
