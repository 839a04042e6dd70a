"""A hostile tenant against the whole farm (real API, Postgres, Redis, worker processes, ffmpeg): playlists that
point at another tenant's files, headers that lie, sources that would explode when decoded, a decoder that floods
its stderr, a request for ten thousand chunks, one tenant flooding the queue, and what a child process can see."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from shared import reaper
from shared.broker import broker_contents, make_celery
from shared.db import session_scope
from shared.models import Chunk, Job
from shared.schema import grant_worker_role
from shared.settings import Settings
from tests.integration.conftest import BLUR, download, events_of, submit, wait_finished, with_face_models
from tests.support import hostile
from tests.support.farm import Farm, wait_for
from tests.support.live import live_api
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key
from workers.video.frame_scan import frame_times

pytestmark = pytest.mark.integration

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}}


def _storage(settings: Settings) -> Path:
    return Path(settings.storage_url.removeprefix("file://"))


def _files(settings: Settings) -> list[Path]:
    root = _storage(settings)
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def _jobs(settings: Settings) -> int:
    with session_scope(settings.database_url) as s:
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


# -- 1. the hole: manifests and scripts that read another tenant's files ----------------------------------------


def test_playlists_manifests_and_scripts_naming_another_tenants_output_are_refused_and_leave_nothing(
    farm: Farm, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    farm.worker("w1")
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as victim:
        victim_job = submit(victim, clip_short, PASSTHROUGH)
        assert wait_finished(victim, victim_job, farm)["status"] == "succeeded"
    stolen = _storage(settings) / "jobs" / victim_job / "output.mp4"
    assert stolen.exists()

    attacks = {
        "hls": hostile.hls_playlist(tmp_path / "playlist", stolen),
        "dash": hostile.dash_manifest(tmp_path / "manifest", stolen),
        "ffconcat": hostile.ffconcat(tmp_path / "script", stolen),
    }
    with TestClient(create_app(settings), headers=bearer(make_key(settings))) as attacker:
        for kind, upload in attacks.items():
            jobs_before, files_before = _jobs(settings), _files(settings)
            response = attacker.post(
                "/v1/jobs",
                files={"target": ("clip", upload.read_bytes(), "application/octet-stream")},  # no extension
                data={"options": json.dumps(PASSTHROUGH)},
            )
            assert response.status_code == 422, (kind, response.text)
            assert response.json()["error"]["code"] == "media_format_refused", kind
            assert _jobs(settings) == jobs_before, f"{kind}: a job row was left"
            assert _files(settings) == files_before, f"{kind}: a stored file was left"
        assert attacker.get("/v1/jobs").json()["jobs"] == []


# -- 2. headers that lie ----------------------------------------------------------------------------------------


class TestHeaderClaimsAnHour:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        return with_face_models(settings, data_dir, tmp_path)

    def test_a_header_claiming_an_hour_is_planned_by_the_seconds_it_holds(
        self, farm: Farm, api: TestClient, tmp_path: Path
    ) -> None:
        clip = hostile.mkv_claiming(tmp_path / "claims-an-hour.mkv", seconds=2, claimed_seconds=3600)
        farm.worker("w1")
        job_id = submit(api, clip, {**BLUR, "chunk_frames": 20})
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        assert body["progress"]["frames_total"] == 60, "planned by the frames it holds"
        assert body["chunks"]["total"] == 3
        assert len(frame_times(download(api, job_id, tmp_path / "out.mp4"))) == 60


class TestFramesOverTheLimit:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        return with_face_models(settings.model_copy(update={"max_frames": 45}), data_dir, tmp_path)

    def test_a_file_holding_more_frames_than_the_limit_fails_with_a_clear_code(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        clip = hostile.mkv_claiming(tmp_path / "claims-a-second.mkv", seconds=2, claimed_seconds=1)
        farm.worker("w1")
        job_id = submit(api, clip, BLUR)  # its header says 30 frames: accepted
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "failed" and body["error"]["code"] == "too_many_frames", body
        assert _chunks(settings, job_id) == [], "nothing was planned"


def test_a_source_whose_header_claims_40000_squared_pixels_is_refused_before_decoding(
    settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    image = hostile.png_claiming(tmp_path / "face.png", 40000, 40000)
    logs = tmp_path / "logs"
    logs.mkdir()
    with live_api(settings, logs) as server:
        key = make_key(settings)
        files = [
            ("target", ("clip.mp4", clip_short.read_bytes(), "video/mp4")),
            ("source", ("face.png", image.read_bytes(), "image/png")),
        ]
        options = {"options": json.dumps({"processors": ["face_swapper"]})}
        with httpx.Client(base_url=server.url, headers=bearer(key), timeout=60) as client:
            warm = client.post("/v1/jobs", files=files[:1], data={"options": json.dumps(PASSTHROUGH)})  # every path
            before = server.memory()
            response = client.post("/v1/jobs", files=files, data=options)
            after = server.memory()
            client.post(f"/v1/jobs/{warm.json()['id']}/cancel")  # no worker here: leave no job for another test's
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "source_resolution_too_large"
    assert after["VmHWM"] - before["VmHWM"] < 16 << 20, f"the API's peak memory grew: {before} -> {after}"


# -- 3. a decoder that floods its stderr ------------------------------------------------------------------------


class TestStderrFlood:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        update = {"chunk_stall_seconds": 60.0, "lease_seconds": 30, "max_attempts": 1}
        return with_face_models(settings.model_copy(update=update), data_dir, tmp_path)

    def test_a_corrupt_stream_flooding_stderr_ends_its_chunks_and_the_worker_goes_on(
        self, farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
    ) -> None:
        # A quarter of 720p's pixels in slices of a quarter of the macroblocks: as many errors a frame as 720p's.
        corrupt = hostile.corrupt_h264(tmp_path / "corrupt.mp4", seconds=10, size="640x360", slice_mbs=2)
        assert hostile.stderr_bytes_of_decoding(corrupt) > 1 << 20, "megabytes of decoder errors, or no test"
        farm.worker("w1")
        flooded = submit(api, corrupt, {**BLUR, "chunk_frames": 150})
        body = wait_finished(api, flooded, farm, timeout=600)
        if body["status"] == "failed":  # a failure is an answer too, if it says what happened
            assert body["error"]["code"] and body["error"]["message"], body
        else:
            assert body["status"] == "succeeded", body
        after = submit(api, clip_short, {**BLUR, "chunk_frames": 60})
        assert wait_finished(api, after, farm)["status"] == "succeeded"
        assert farm.procs["w1"].poll() is None, "the worker must survive the flood"


# -- 4. ten thousand one-frame chunks ---------------------------------------------------------------------------


class TestChunkCount:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"max_chunks_per_job": 40})

    def test_ten_thousand_one_frame_chunks_of_a_minute_are_planned_within_the_cap(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        clip = make_clip(tmp_path / "minute.mp4", seconds=60, size="64x64", rate="500/3", audio=False)
        assert len(frame_times(clip)) == 10_000
        farm.worker("w1")
        job_id = submit(api, clip, {**PASSTHROUGH, "chunk_frames": 1})
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        chunks = _chunks(settings, job_id)
        assert len(chunks) <= 40 and body["chunks"]["total"] == len(chunks)
        assert sum(c.frame_count for c in chunks) == body["progress"]["frames_total"] == 10_000
        widened = events_of(api, job_id, "warning")
        assert [e["error_code"] for e in widened] == ["chunks_widened"], widened
        assert "1 frames were asked for" in widened[0]["message"]
        assert len(frame_times(download(api, job_id, tmp_path / "out.mp4"))) == 10_000


# -- 5. fair share ----------------------------------------------------------------------------------------------


FLOOD = 20  # urgent jobs of one tenant: by priority alone, the other tenant's job would wait for all of them


def test_a_tenant_flooding_the_farm_with_urgent_jobs_does_not_starve_another(
    farm: Farm, settings: Settings, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "tiny.mp4", seconds=1, size="64x64", audio=False)
    options = json.dumps({**PASSTHROUGH, "chunk_frames": 30})

    def post(client: TestClient, priority: int) -> str:
        files = {"target": ("tiny.mp4", clip.read_bytes(), "video/mp4")}
        response = client.post("/v1/jobs", files=files, data={"options": options, "priority": str(priority)})
        assert response.status_code == 202, response.text
        return str(response.json()["id"])

    with (
        TestClient(create_app(settings), headers=bearer(make_key(settings))) as busy,
        TestClient(create_app(settings), headers=bearer(make_key(settings))) as quiet,
    ):
        flood = [post(busy, 9) for _ in range(FLOOD)]
        modest = post(quiet, 1)
        farm.worker("w1")  # one worker, all the jobs waiting for it
        try:
            assert wait_finished(quiet, modest, farm)["status"] == "succeeded"
            with session_scope(settings.database_url) as s:
                started = s.scalar(select(Chunk.started_at).where(Chunk.job_id == modest))
                busy_starts = list(s.scalars(select(Chunk.started_at).where(Chunk.job_id.in_(flood))))
            assert started is not None
            before = sum(1 for at in busy_starts if at is not None and at < started)
            assert before <= 2, f"{before} of the busy tenant's chunks started before the other tenant's first"
            assert len(busy_starts) == FLOOD, "every flood job was planned before the other tenant's job rendered"
            assert sum(1 for at in busy_starts if at is None or at > started) >= FLOOD - 5, "the flood had drained"
            # Tokens spent on the other tenant's chunk were given back: every queued chunk still has a message
            # naming it, so the reaper finds nothing lost and tells no job its messages were re-sent.
            celery = make_celery(settings)
            try:
                contents = broker_contents(celery)
            finally:
                celery.close()
            assert contents is not None
            with session_scope(settings.database_url) as s:
                lost = [
                    w for w in reaper.missing(s, contents, taken_within=settings.lease_seconds) if w.job_id in flood
                ]
            assert not lost, f"{len(lost)} queued chunks have no message of their own"
        finally:
            for job_id in flood:  # leave no rendering job behind for other tests' workers
                busy.post(f"/v1/jobs/{job_id}/cancel")


# -- 6. what a child process can see ----------------------------------------------------------------------------


def _children(leader: int, names: set[str]) -> Iterator[tuple[int, bytes, bytes]]:
    """``(pid, cmdline, environ)`` of the processes of ``leader``'s process group whose name is in ``names``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != leader or (entry / "comm").read_text().strip() not in names:
                continue
            yield int(entry.name), (entry / "cmdline").read_bytes(), (entry / "environ").read_bytes()
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue


class TestChildEnvironment:
    SECRETS = {"SWAPFARM_S3_SECRET": "s3-secret-9f2e", "AWS_SECRET_ACCESS_KEY": "aws-secret-77c1"}

    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        return with_face_models(settings.model_copy(update={"lease_seconds": 30}), data_dir, tmp_path)

    def test_the_ffmpeg_of_a_render_sees_no_secret(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        clip = make_clip(tmp_path / "clip.mp4", seconds=4, size="320x180")
        farm.worker("w1", env=self.SECRETS)
        leader = farm.procs["w1"].pid
        job_id = submit(api, clip, {**BLUR, "chunk_frames": 120})
        seen: dict[int, tuple[bytes, bytes]] = {}

        def a_decoder_seen() -> bool:
            seen.update({pid: (cmd, env) for pid, cmd, env in _children(leader, {"ffmpeg", "ffprobe"})})
            return any(b"rawvideo" in cmd for cmd, _ in seen.values())

        wait_for(a_decoder_seen, timeout=240, what="the render's ffmpeg", interval=0.01)
        assert wait_finished(api, job_id, farm)["status"] == "succeeded"
        secrets = [*self.SECRETS.values(), settings.database_url, settings.broker_url]
        for pid, (cmd, env) in seen.items():
            names = {item.split(b"=", 1)[0].decode() for item in env.split(b"\0") if item}
            assert not {n for n in names if n.startswith(("SWAPFARM_", "AWS_"))}, (pid, cmd[:80], names)
            assert not [s for s in secrets if s.encode() in env], (pid, cmd[:80])
            assert names <= {"PATH", "LD_LIBRARY_PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ"}, names


# -- 7. the workers' database role ------------------------------------------------------------------------------


class TestWorkerRole:
    @pytest.fixture
    def role(self, database_url: str) -> Iterator[str]:
        name = f"swapfarm_worker_{uuid.uuid4().hex[:8]}"
        admin = database_url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{name}" LOGIN')
        grant_worker_role(database_url, name)
        yield name
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{name}"')
            conn.execute(f'DROP ROLE "{name}"')

    def test_workers_render_with_a_role_that_cannot_touch_api_keys(
        self, farm: Farm, api: TestClient, settings: Settings, role: str, clip_short: Path
    ) -> None:
        as_worker = settings.database_url.replace("://postgres@", f"://{role}@")
        with psycopg.connect(as_worker.replace("+psycopg", ""), autocommit=True) as conn:
            for statement in ("SELECT count(*) FROM api_keys", "DELETE FROM api_keys", "DROP TABLE jobs"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
        farm.settings = settings.model_copy(update={"database_url": as_worker})
        farm.worker("w1")
        job_id = submit(api, clip_short, {**PASSTHROUGH, "chunk_frames": 40})
        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
