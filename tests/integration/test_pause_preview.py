"""Pause and resume, and a preview before the long render, on the real farm (Celery workers as processes,
Postgres, Redis, ffmpeg), with tiny clips and the passthrough processor.

Which chunk is rendering when the test acts is set by a gate at the ffmpeg boundary (``tests.support.gates``), not by
timing: the gated chunk's encode waits until the test opens it.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from shared.db import session_scope
from shared.models import Chunk, Job
from shared.settings import Settings
from tests.integration.conftest import download, events_of, submit, wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.gates import Gate, gated_encoder
from tests.support.media import assert_frames_match, make_clip, read_frames
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration
logger = logging.getLogger(__name__)

# 48 frames of 64x64 in chunks of 8: six chunks, each one ffmpeg process
LOSSLESS: dict[str, Any] = {
    "processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}, "chunk_frames": 8,
}  # fmt: skip


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return make_clip(tmp_path / "tiny.mp4", seconds=1.6, size="64x64")


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _status(settings: Settings, job_id: str) -> str:
    with session_scope(settings.database_url) as s:
        job = s.get(Job, job_id)
        assert job is not None
        return job.status


def _wait_gate(api: TestClient, job_id: str, gate: Gate, farm: Farm) -> None:
    """Wait until the gated chunk's encode waits at the gate (the job must not end first)."""

    def reached() -> bool:
        body = api.get(f"/v1/jobs/{job_id}").json()
        assert body["status"] not in {"succeeded", "failed", "cancelled"}, (body, farm.log("w1")[-3000:])
        return gate.reached.exists()

    try:
        wait_for(reached, timeout=120, what="the gated chunk to start rendering")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{farm.log('w1')[-3000:]}") from exc


def test_a_job_paused_mid_render_finishes_its_running_chunk_starts_none_and_resumes_from_the_chunks_done(
    farm: Farm, api: TestClient, settings: Settings, tiny: Path, tmp_path: Path
) -> None:
    gate = gated_encoder(tmp_path / "gate", chunk_index=2)
    farm.worker("w1", env=gate.env)
    job_id = submit(api, tiny, LOSSLESS)
    _wait_gate(api, job_id, gate, farm)
    assert [(c.index, c.status) for c in _chunks(settings, job_id)][:3] == [(0, "done"), (1, "done"), (2, "running")]

    paused = api.post(f"/v1/jobs/{job_id}/pause")
    assert paused.status_code == 200 and paused.json()["status"] == "paused", paused.text
    again = api.post(f"/v1/jobs/{job_id}/pause")  # pausing a paused job: no change
    assert again.status_code == 200 and again.json()["status"] == "paused"
    wrong = api.post(f"/v1/jobs/{job_id}/approve")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (409, "job_not_awaiting_approval")
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as other:
        assert other.post(f"/v1/jobs/{job_id}/resume").status_code == 404  # another tenant's job: not found

    gate.open()  # the running chunk finishes; no other chunk starts while the job is paused
    wait_for(lambda: _chunks(settings, job_id)[2].status == "done", timeout=60, what="the running chunk to finish")
    assert _status(settings, job_id) == "paused"
    assert [c.status for c in _chunks(settings, job_id)] == ["done"] * 3 + ["queued"] * 3

    resumed = api.post(f"/v1/jobs/{job_id}/resume")
    assert resumed.status_code == 202, resumed.text
    not_paused = api.post(f"/v1/jobs/{job_id}/resume")
    assert (not_paused.status_code, not_paused.json()["error"]["code"]) == (409, "job_not_resumable")
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body

    chunks = _chunks(settings, job_id)
    assert [(c.status, c.attempts) for c in chunks] == [("done", 1)] * 6, "no chunk ran twice"
    events = events_of(api, job_id)
    started = [e["chunk_index"] for e in events if e["kind"] == "chunk_started"]
    assert sorted(started) == list(range(6)), started
    resumed_at = next(e["id"] for e in events if e["kind"] == "resumed")
    paused_at = next(e["id"] for e in events if e["kind"] == "paused")
    later = [e["chunk_index"] for e in events if e["kind"] == "chunk_started" and e["id"] > paused_at]
    assert sorted(later) == [3, 4, 5] and all(
        e["id"] > resumed_at for e in events if e["kind"] == "chunk_started" and e["chunk_index"] >= 3
    ), "nothing started between the pause and the resume"
    assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(tiny))


def test_a_job_paused_now_stops_its_running_chunk_and_renders_it_again_without_counting_the_attempt(
    farm: Farm, api: TestClient, settings: Settings, tiny: Path, tmp_path: Path
) -> None:
    gate = gated_encoder(tmp_path / "gate", chunk_index=1)
    farm.worker("w1", env=gate.env)
    job_id = submit(api, tiny, LOSSLESS)
    _wait_gate(api, job_id, gate, farm)

    paused = api.post(f"/v1/jobs/{job_id}/pause", params={"now": "true"})
    assert paused.status_code == 200 and paused.json()["status"] == "paused", paused.text
    assert [(c.status, c.attempts) for c in _chunks(settings, job_id)][:2] == [("done", 1), ("queued", 0)]
    wait_for(lambda: "lease lost" in farm.log("w1"), timeout=30, what="the worker to stop the chunk")
    gate.open()
    assert api.post(f"/v1/jobs/{job_id}/resume").status_code == 202
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    assert [(c.status, c.attempts) for c in _chunks(settings, job_id)] == [("done", 1)] * 6
    starts = [e["chunk_index"] for e in events_of(api, job_id, "chunk_started")]
    assert starts.count(1) == 2, "chunk 1 was stopped and rendered again; the stopped attempt is not counted"
    assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(tiny))


def test_a_preview_of_5_frames_waits_for_approval_then_renders_the_rest_without_rendering_them_again(
    farm: Farm, api: TestClient, settings: Settings, tiny: Path, tmp_path: Path
) -> None:
    farm.worker("w1")
    job_id = submit(api, tiny, {**LOSSLESS, "preview": 5})

    def waiting() -> dict[str, Any] | None:
        body: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").json()
        assert body["status"] not in {"succeeded", "failed", "cancelled"}, body
        return body if body["status"] == "awaiting_approval" else None

    body = wait_for(waiting, timeout=120, what="the preview to be ready")
    assert isinstance(body, dict)
    chunks = _chunks(settings, job_id)
    previews = [c for c in chunks if c.preview]
    assert [c.frame_start for c in previews] == [4, 14, 24, 33, 43]  # spread over the 48 frames
    assert all(c.frame_end - c.frame_start == 1 and c.status == "done" for c in previews)
    assert {c.status for c in chunks if not c.preview} == {"held"}
    assert body["chunks"]["held"] == len(chunks) - 5 and body["progress"]["frames_done"] == 5
    assert sorted(range(48)) == sorted(f for c in chunks for f in range(c.frame_start, c.frame_end))
    assert [e["status"] for e in events_of(api, job_id, "awaiting_approval")] == ["awaiting_approval"]
    stills = api.get(f"/v1/jobs/{job_id}/stills").json()
    assert stills["preview"] is True and [s["frame"] for s in stills["stills"]] == [4, 14, 24, 33, 43]
    image = api.get(f"/v1/jobs/{job_id}/stills/{stills['stills'][0]['after']}")
    assert image.status_code == 200 and image.headers["content-type"] == "image/jpeg"
    assert image.content[:2] == b"\xff\xd8"
    wrong = api.post(f"/v1/jobs/{job_id}/pause")
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (409, "job_not_pausable")

    approved = api.post(f"/v1/jobs/{job_id}/approve")
    assert approved.status_code == 202, approved.text
    done = wait_finished(api, job_id, farm)
    assert done["status"] == "succeeded", done

    events = events_of(api, job_id)
    starts = [e["chunk_index"] for e in events if e["kind"] == "chunk_started"]
    preview_indices = {c.index for c in previews}
    assert sorted(starts) == list(range(len(chunks))), "every chunk rendered once"
    assert sum(1 for i in starts if i in preview_indices) == 5, "the preview's 5 chunks were not rendered again"
    approved_event = next(e for e in events if e["kind"] == "approved")
    first = min(
        (e for e in events if e["kind"] == "chunk_started" and e["id"] > approved_event["id"]), key=lambda e: e["id"]
    )
    delay = (datetime.fromisoformat(first["at"]) - datetime.fromisoformat(approved_event["at"])).total_seconds()
    logger.info("preview: %.3fs from approve to the first new chunk running", delay)
    assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(tiny))


def test_a_preview_not_approved_in_time_is_cancelled_by_the_reaper_with_its_files_deleted(
    settings: Settings, api_key: str, tiny: Path, tmp_path: Path
) -> None:
    """Expiry only: a rejected preview is tested in tests/shared/test_pause_control.py, from the console in
    tests/integration/test_console_controls_browser.py and from the CLI in
    tests/integration/test_controls_live_api.py."""
    short = settings.model_copy(update={"preview_ttl_seconds": 1.0})
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(short, logs)
    try:
        farm.worker("w1")
        farm.beat()
        with TestClient(create_app(short), headers=bearer(api_key)) as api:
            expiring = submit(api, tiny, {**LOSSLESS, "preview": 2})
            body = wait_finished(api, expiring, farm)
            assert body["status"] == "cancelled", body
            cancelled = events_of(api, expiring, "cancelled")
            assert [e["error_code"] for e in cancelled] == ["preview_expired"]
            assert events_of(api, expiring, "awaiting_approval"), "it waited for approval first"
            root = Path(short.storage_url.removeprefix("file://")) / "jobs" / expiring
            assert not root.exists() or not any(p.is_file() for p in root.rglob("*")), "its files are deleted"
    finally:
        farm.stop()
