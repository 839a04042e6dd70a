"""Bad workers kept out and jobs routed by tags, through real Celery workers (``shared.worker_health``).

A broken worker is a real worker whose ffmpeg fails every chunk encode (``tests.support.faults.broken_renders``,
a stand-in first on its PATH that no code of the farm knows about).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shared.db import session_scope
from shared.models import Chunk, Job, JobEvent, WorkerPresence, new_id, utcnow
from shared.settings import Settings
from tests.integration.conftest import events_of, submit, wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.faults import broken_renders
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration

# Four chunks of the four-second clip, each one ffmpeg transcode (no frames through Python)
PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}, "chunk_frames": 25}


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """Attempts to spare: a broken worker alone keeps trying (a blocklist holds only while another live worker
    could take the job), and the tests below need it to fail a second job before the first runs out. On an idle
    machine it fails a chunk within a second, so the first job's chunks spend many attempts before that."""
    return settings.model_copy(update={"max_attempts": 40})


def _own_name(role: str) -> str:
    """A worker name no other test uses: failures are counted per worker name across jobs (the quarantine window),
    so a broken worker that kept the name of another test's would arrive with that test's failures, in any order."""
    return f"{role}-{new_id()[:8]}@test"


def _other_tenants_job(api: TestClient, settings: Settings, clip: Path) -> str:
    """A job of a second tenant: fair share serves it next, ahead of the first tenant's older job."""
    files = {"target": (clip.name, clip.read_bytes(), "video/mp4")}
    headers = bearer(make_key(settings))
    response = api.post("/v1/jobs", files=files, data={"options": json.dumps(PASSTHROUGH)}, headers=headers)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _events(api: TestClient, settings: Settings, job_id: str, kind: str) -> list[dict[str, Any]]:
    with session_scope(settings.database_url) as s:
        rows = s.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == kind)).all()
        return [{"worker": r.worker, "error_code": r.error_code, "message": r.message} for r in rows]


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _worker(settings: Settings, name: str) -> WorkerPresence | None:
    with session_scope(settings.database_url) as s:
        row = s.get(WorkerPresence, name)
        if row is not None:
            s.expunge(row)
        return row


def _finished(api: TestClient, settings: Settings, job_id: str, farm: Farm) -> dict[str, Any]:
    with session_scope(settings.database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        tenant = job.tenant_id
    if tenant is not None and api.get(f"/v1/jobs/{job_id}").status_code == 404:  # the second tenant's
        wait_for(lambda: _status(settings, job_id) in {"succeeded", "failed", "cancelled"}, timeout=300, what=job_id)
        return {"status": _status(settings, job_id)}
    return wait_finished(api, job_id, farm)


def _status(settings: Settings, job_id: str) -> str:
    with session_scope(settings.database_url) as s:
        job = s.get(Job, job_id)
        return job.status if job is not None else ""


def test_a_broken_worker_is_blocklisted_then_quarantined_while_a_healthy_one_finishes_the_jobs(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    broken = farm.worker("w1", env=broken_renders(tmp_path / "broken"), hostname=_own_name("broken"))
    first = submit(api, clip_short, PASSTHROUGH)
    # Alone, it fails the first job's chunk twice (blocklist_after = 2): it takes no more of that job.
    wait_for(lambda: events_of(api, first, "worker_blocklisted"), timeout=120, what="the broken worker blocklisted")
    second = _other_tenants_job(api, settings, clip_short)
    # A failure on a second job within the window: quarantined, it takes no work at all.
    wait_for(lambda: _events(api, settings, second, "worker_quarantined"), timeout=120, what="quarantined")
    row = _worker(settings, broken)
    assert row is not None and row.quarantined_at is not None and "2 jobs" in (row.quarantine_reason or "")

    healthy = farm.worker("w2")
    for job_id in (first, second):
        body = _finished(api, settings, job_id, farm)
        assert body["status"] == "succeeded", body
        assert {(c.status, c.worker) for c in _chunks(settings, job_id)} == {("done", healthy)}
    failed = {job_id: _events(api, settings, job_id, "chunk_failed") for job_id in (first, second)}
    assert {e["worker"] for found in failed.values() for e in found} == {broken}
    assert len(failed[first]) >= 2 and len(failed[second]) == 1  # nothing taken once quarantined
    (blocked,) = events_of(api, first, "worker_blocklisted")
    assert blocked["worker"] == broken and blocked["error_code"] == "worker_blocklisted"
    # the second job's work was left to the healthy worker, its stitch too: no step on the broken one since
    assert {e["worker"] for e in _events(api, settings, second, "stitch_started")} == {healthy}

    # seen where an operator looks: the farm's metrics and the console's workers page
    assert "swapfarm_workers_quarantined 1.0" in api.get("/metrics").text
    admin = bearer(make_key(settings, admin=True))
    page = api.get("/ui/workers", headers=admin).text
    assert "data-quarantine" in page and "failed chunks of 2 jobs" in page

    # an admin releases it (a tenant may not); releasing it again is a conflict with a stable code
    assert api.post(f"/v1/workers/{broken}/release").status_code == 403
    assert api.post(f"/v1/workers/{broken}/release", headers=admin).json() == {"name": broken, "released": True}
    again = api.post(f"/v1/workers/{broken}/release", headers=admin)
    assert again.status_code == 409 and again.json()["error"]["code"] == "worker_not_quarantined"
    row = _worker(settings, broken)
    assert row is not None and row.quarantined_at is None
    assert "swapfarm_workers_quarantined 0.0" in api.get("/metrics").text


def test_a_chunk_that_fails_on_a_broken_worker_is_rendered_by_the_other_live_worker(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    started = utcnow()
    broken = farm.worker("w1", env=broken_renders(tmp_path / "broken"), hostname=_own_name("soft"))
    healthy = farm.worker("w2")

    def live(name: str) -> bool:
        row = _worker(settings, name)
        return row is not None and row.stopped_at is None and row.started_at >= started

    wait_for(lambda: live(broken) and live(healthy), timeout=120, what="both workers to take work")
    job_id = submit(api, clip_short, PASSTHROUGH)
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    with session_scope(settings.database_url) as s:
        failures = s.execute(
            select(JobEvent.chunk_index, JobEvent.worker)
            .where(JobEvent.job_id == job_id, JobEvent.kind == "chunk_failed")
        ).all()  # fmt: skip
    assert failures, "the broken worker took a chunk"
    assert {worker for _, worker in failures} == {broken}
    failed = [index for index, _ in failures]
    assert sorted(failed) == sorted(set(failed)), "no chunk failed twice: after failing it waited for the other"
    assert {(c.status, c.worker) for c in _chunks(settings, job_id)} == {("done", healthy)}


def test_a_quarantined_worker_that_restarts_healthy_is_released_and_one_still_broken_is_not(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    env = broken_renders(tmp_path / "broken")
    broken = farm.worker("w1", env=env, hostname=_own_name("restarted"))
    first = submit(api, clip_short, PASSTHROUGH)
    wait_for(lambda: events_of(api, first, "worker_blocklisted"), timeout=120, what="blocklisted")
    second = _other_tenants_job(api, settings, clip_short)
    wait_for(lambda: _events(api, settings, second, "worker_quarantined"), timeout=120, what="quarantined")

    def restarted() -> bool:
        row = _worker(settings, broken)
        return row is not None and row.stopped_at is None and "still quarantined" in farm.log("w1")

    farm.stop()  # stops it cleanly; started again with the same broken ffmpeg, its self-test fails
    farm.worker("w1", env=env, hostname=broken)
    wait_for(restarted, timeout=120, what="the broken worker's failed self-test")
    assert _worker(settings, broken).quarantined_at is not None  # type: ignore[union-attr]
    farm.stop()
    farm.worker("w1", hostname=broken)  # fixed: its self-test passes, it is released and finishes both jobs
    for job_id in (first, second):
        assert _finished(api, settings, job_id, farm)["status"] == "succeeded"
    row = _worker(settings, broken)
    assert row is not None and row.quarantined_at is None
    assert "healthy self-test" in (row.quarantine_reason or "")


def test_max_failed_chunks_fails_the_job_early_instead_of_burning_its_retries(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    broken = farm.worker("w1", env=broken_renders(tmp_path / "broken"), hostname=_own_name("limited"))
    job_id = submit(api, clip_short, {**PASSTHROUGH, "max_failed_chunks": 1})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "failed" and body["error"]["code"] == "too_many_failed_chunks", body
    assert len(events_of(api, job_id, "chunk_failed")) == 1  # no retry burnt past the job's limit
    row = _worker(settings, broken)
    assert row is not None and row.quarantined_at is None  # one job's failures alone quarantine nothing


def test_a_job_that_needs_tags_no_live_worker_has_waits_with_a_reason_and_runs_when_a_tagged_worker_starts(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path
) -> None:
    plain = farm.worker("w1", tags=["studio-b"])
    tagged_job = submit(api, clip_short, {**PASSTHROUGH, "required_tags": ["studio-a", "48gb"]})
    other = submit(api, clip_short, PASSTHROUGH)
    assert wait_finished(api, other, farm)["status"] == "succeeded"  # the live worker works, just not on it
    body = api.get(f"/v1/jobs/{tagged_job}").json()
    assert body["status"] in {"queued", "planning", "rendering"} and body["wait_reason"] == "no_worker_with_tags"
    (waiting,) = events_of(api, tagged_job, "waiting_for_worker")
    assert waiting["error_code"] == "no_worker_with_tags" and "48gb, studio-a" in waiting["message"]
    assert {c.status for c in _chunks(settings, tagged_job)} <= {"queued"}

    # a worker with only one of the tags does not take it either; one with both does
    farm.worker("w2", tags=["studio-a"])
    tagged = farm.worker("w3", tags=["studio-a", "48gb", "spare"])
    body = wait_finished(api, tagged_job, farm)
    assert body["status"] == "succeeded" and body["wait_reason"] is None, body
    assert {(c.status, c.worker) for c in _chunks(settings, tagged_job)} == {("done", tagged)}
    assert plain not in {c.worker for c in _chunks(settings, tagged_job)}


def test_refused_tags_are_an_input_error() -> None:
    from pydantic import ValidationError

    from shared.options import JobOptions

    with pytest.raises(ValidationError):
        JobOptions.model_validate({"required_tags": ["../etc"]})
    assert JobOptions.model_validate({"required_tags": ["studio-a"]}).required_tags == ["studio-a"]
