"""The farm under faults: workers killed, the database restarted, the stitcher killed, a message delivered twice,
a chunk that always fails (a broker lost or restarted: ``test_recovery.py``). Postgres is the source of truth:
nothing is lost, nothing is done twice.

Every test that stops a server starts its own on a spare port (``tests.support.servers``); the machine's shared
Postgres and Redis are never stopped. Sleeps and timeouts here only guard against hangs or let a fault last; no
assertion is about speed.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import select

from shared.broker import make_celery
from shared.db import engine_for, session_scope
from shared.dispatch import CeleryDispatcher
from shared.models import Chunk, Job, JobEvent, utcnow
from shared.schema import upgrade
from shared.settings import Settings
from shared.states import FINISHED_JOB_STATES
from shared.storage import Storage
from shared.tasks import RENDER_CHUNK, ChunkPayload, render_queue
from tests.integration.conftest import PLAIN_BLUR, download, submit, wait_finished, with_face_models
from tests.support.farm import Farm, wait_for
from tests.support.faults import slow_chunks, slow_tool
from tests.support.media import assert_frames_match, make_clip, read_frames, stream_info
from tests.support.servers import PostgresServer

pytestmark = pytest.mark.integration

LOSSLESS: dict[str, Any] = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}
# The faults strike both render paths: the one-process transcode and the pipes through a pixel-touching processor.
PIPELINES: dict[str, dict[str, Any]] = {
    "transcode": LOSSLESS,
    "pixels": {"processors": ["face_blur"], "encoder": {"lossless": True, "preset": "ultrafast"}, "face": PLAIN_BLUR},
}


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _chunk(settings: Settings, chunk_id: str) -> Chunk:
    with session_scope(settings.database_url) as s:
        return s.get_one(Chunk, chunk_id)


def _job(settings: Settings, job_id: str) -> Job:
    with session_scope(settings.database_url) as s:
        return s.get_one(Job, job_id)


def _events(settings: Settings, job_id: str, kind: str) -> list[JobEvent]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == kind)))


def _done(settings: Settings, job_id: str) -> int:
    return sum(c.status == "done" for c in _chunks(settings, job_id))


def _running_on(settings: Settings, job_id: str, host: str) -> Chunk | None:
    return next((c for c in _chunks(settings, job_id) if c.status == "running" and c.worker == host), None)


def _logged_at(log: str, text: str) -> list[datetime]:
    """When a worker logged a message containing ``text`` (its log is JSON lines)."""
    found = []
    for line in log.splitlines():
        if text in line and line.startswith("{"):
            found.append(datetime.fromisoformat(json.loads(line)["time"]))
    return found


def _assert_counted_once(settings: Settings, job_id: str) -> None:
    """Every chunk done once and counted once: the job's counters equal the sum of its chunks."""
    job, chunks = _job(settings, job_id), _chunks(settings, job_id)
    assert all(c.status == "done" for c in chunks), [(c.index, c.status) for c in chunks]
    assert all(c.frames_done == c.frame_count for c in chunks)
    assert job.chunks_done == job.chunks_total == len(chunks)
    assert job.frames_done == job.frames_total == sum(c.frame_count for c in chunks)


# -- 1. workers killed mid-chunk --------------------------------------------------------------------------------


class TestWorkersKilledMidChunk:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        # Five kills may land on the same chunk: each kill is an attempt, so the limit is above the kills.
        return with_face_models(settings.model_copy(update={"max_attempts": 10}), data_dir, tmp_path)

    @pytest.mark.parametrize("pipeline", list(PIPELINES))
    def test_five_sigkills_mid_chunk_lose_and_repeat_no_frame(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path, pipeline: str
    ) -> None:
        clip = make_clip(tmp_path / "clip.mp4", seconds=6, size="64x64")  # 12 chunks: room for five kills
        # Every chunk's encode starts half a second late: each chunk lasts long enough for a kill to land in it,
        # whatever the machine's speed, without big frames to spend CPU on.
        slow = slow_chunks(tmp_path / "bin", 0.5)
        farm.beat()
        job_id = submit(api, clip, {**PIPELINES[pipeline], "chunk_frames": 16})
        killed: list[str] = []
        started = 0
        while len(killed) < 5:
            started += 1
            host = farm.worker(f"w{started}", env=slow)
            chunk = wait_for(
                lambda host=host: _running_on(settings, job_id, host), timeout=180, what=f"a chunk rendering on {host}"
            )
            assert isinstance(chunk, Chunk)
            farm.kill(f"w{started}")
            after = _chunk(settings, chunk.id)
            # Mid-chunk for sure: the attempt was claimed and, with its worker dead, can never be finished.
            if after.status == "running" and after.worker == host and after.attempts == chunk.attempts:
                killed.append(chunk.id)
        farm.worker("w1")  # the survivor (w1's log again, so wait_finished shows it)

        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        _assert_counted_once(settings, job_id)
        chunks = _chunks(settings, job_id)
        assert sum(c.attempts for c in chunks) >= len(chunks) + len(killed)
        requeued = {(e.chunk_index, e.error_code) for e in _events(settings, job_id, "chunk_requeued")}
        for chunk in (c for c in chunks if c.id in killed):
            assert chunk.attempts >= 2 and (chunk.index, "worker_lost") in requeued, (chunk.index, chunk.attempts)
            assert chunk.error_code is None, "a chunk done at last shows no old error (its events keep it)"
        assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip))


# -- 2. Redis loses everything: tests/integration/test_recovery.py (on a farm with its own Postgres and Redis) ------


# -- 3. Postgres restarts ---------------------------------------------------------------------------------------


@pytest.fixture
def private_postgres() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


def _route_answers(api: TestClient, job_id: str, clip: Path) -> dict[str, Any]:
    """Call every route of the API once; returns ``{"METHOD path": (status, body)}``."""
    answers: dict[str, Any] = {}
    for route in api.app.routes:  # type: ignore[attr-defined]
        if not isinstance(route, APIRoute):
            continue
        path = route.path.replace("{job_id}", job_id)
        for method in sorted(route.methods - {"HEAD"}):
            if method == "POST" and path == "/v1/jobs":
                files = {"target": (clip.name, clip.read_bytes(), "video/mp4")}
                response = api.post(path, files=files, data={"options": json.dumps(LOSSLESS)})
            else:
                response = api.request(method, path, params={"max_seconds": 1} if "stream" in path else None)
            answers[f"{method} {route.path}"] = (response.status_code, response.content[:300])
    return answers


class TestDatabaseRestart:
    @pytest.fixture
    def database_url(self, private_postgres: PostgresServer) -> Iterator[str]:
        url = private_postgres.create_database("swapfarm")
        upgrade(url)
        yield url
        engine_for(url).dispose()

    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        return settings.model_copy(update={"requeue_after_seconds": 5})

    def test_a_database_restart_mid_job_leaves_no_job_stuck_and_the_api_answers_503(
        self,
        farm: Farm,
        api: TestClient,
        settings: Settings,
        private_postgres: PostgresServer,
        clip_short: Path,
        tmp_path: Path,
    ) -> None:
        clip = make_clip(tmp_path / "clip.mp4", seconds=8, size="64x64")
        farm.worker("w1", env=slow_chunks(tmp_path / "bin", 0.5))  # chunks left to render when it stops
        farm.beat()
        job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 16})
        wait_for(lambda: _done(settings, job_id) >= 2, timeout=180, what="two chunks done")
        stored = Storage(settings.storage_url)
        before = stored.listdir(stored.url("jobs"))
        leases = [c.lease_expires_at for c in _chunks(settings, job_id) if c.lease_expires_at is not None]
        leases.append(_job(settings, job_id).lease_expires_at or utcnow())

        private_postgres.stop()
        try:
            answers = _route_answers(api, job_id, clip_short)
            # The outage outlasts every lease held when it began and the reaper meets it, so that the workers see
            # it in heartbeats, finishes and claims.
            wait_for(
                lambda: utcnow() > max(leases) and "the database is unavailable" in farm.log("beat"),
                timeout=120,
                what="the outage outlasting the leases",
            )
            answers_later = _route_answers(api, job_id, clip_short)
        finally:
            private_postgres.start()

        for answered in (answers, answers_later):
            for route, (status, content) in answered.items():
                assert status != 500, f"{route} answered 500 while the database was down: {content!r}"
                if route not in {"GET /healthz", "GET /metrics"}:
                    assert status == 503, f"{route} answered {status}: {content!r}"
                    if route != "GET /readyz":
                        assert json.loads(content)["error"]["code"] == "service_unavailable"
        assert stored.listdir(stored.url("jobs")) == before, "a refused submission left files behind"

        body = wait_finished(api, job_id, farm)
        assert body["status"] == "succeeded", body
        assert farm.procs["w1"].poll() is None, "the worker should have waited the outage out, not died"
        with session_scope(settings.database_url) as s:
            states = set(s.scalars(select(Job.status)))
        assert states <= FINISHED_JOB_STATES, f"a job is stuck: {states}"
        _assert_counted_once(settings, job_id)
        errors = {e.error_code for e in _events(settings, job_id, "chunk_failed")}
        assert "processor_failed" not in errors, "a database outage was recorded as the chunk's own failure"
        assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip))
        assert api.get("/readyz").status_code == 200


# -- 4. the stitcher killed mid-stitch --------------------------------------------------------------------------


def _children_running(leader: int, marker: str) -> bool:
    """Whether a process of ``leader``'s process group runs a command line containing ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != leader:
                continue
            if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                return True
        except (ProcessLookupError, FileNotFoundError, PermissionError):
            continue
    return False


class _OutputWatcher(threading.Thread):
    """Records the size of the job's output each time it is seen, to catch a half-written file ever visible."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.sizes, self.stop = path, set[int](), threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.005):
            try:
                self.sizes.add(self.path.stat().st_size)
            except FileNotFoundError:
                continue


def test_a_stitcher_killed_mid_stitch_is_replaced_and_the_output_is_whole(
    farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    # A long PCM soundtrack in a MOV: the stitch re-encodes it to AAC, a stitch of seconds over few, small frames.
    clip = make_clip(tmp_path / "long.mov", seconds=300, size="96x64", rate="2", extra=["-c:a", "pcm_s16le"])
    farm.worker("r1", queues="control,render.cpu,render.any")
    farm.beat()
    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 100})
    wait_for(lambda: _job(settings, job_id).status == "stitching", timeout=240, what="the job ready to stitch")
    output = Path(settings.storage_url.removeprefix("file://")) / "jobs" / job_id / "output.mp4"
    watcher = _OutputWatcher(output)
    watcher.start()

    farm.worker("s1", queues="stitch")
    leader = farm.procs["s1"].pid
    wait_for(lambda: _children_running(leader, "concat"), timeout=120, what="the stitch's ffmpeg", interval=0.01)
    farm.kill("s1")
    assert _job(settings, job_id).status == "stitching"
    assert not output.exists(), "the killed stitcher published an output"

    farm.worker("w2", queues="stitch")  # the reaper sends the stitch again once the dead one's lease expires
    body = wait_finished(api, job_id, farm)
    watcher.stop.set()
    watcher.join()
    assert body["status"] == "succeeded", body
    assert _job(settings, job_id).attempts >= 2, "the stitch should have been run a second time"
    assert watcher.sizes == {output.stat().st_size}, f"a partial output was visible: sizes {watcher.sizes}"
    result = download(api, job_id, tmp_path / "out.mp4")
    assert_frames_match(read_frames(result), read_frames(clip))
    audio_out, audio_in = stream_info(result)["audio"], stream_info(clip)["audio"]
    assert abs(float(audio_out["duration"]) - float(audio_in["duration"])) < 0.1


# -- 5. one render_chunk message delivered twice at once --------------------------------------------------------


class TestDuplicateDelivery:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        # A lease no load on the machine lets expire: a second claim could then only come from the second message.
        return settings.model_copy(update={"lease_seconds": 60})

    def test_a_render_message_delivered_twice_at_once_renders_and_counts_once(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        clip = make_clip(tmp_path / "clip.mp4", seconds=5, size="64x64")
        # The render lasts two seconds at least (its encode starts late), so the duplicate comes while it runs.
        slow = slow_chunks(tmp_path / "bin", 2)
        hosts = [farm.worker("w1", env=slow), farm.worker("w2", env=slow)]
        job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 1000})  # one chunk
        chunk = wait_for(lambda: next(iter(_chunks(settings, job_id)), None), timeout=120, what="the plan")
        assert isinstance(chunk, Chunk)
        wait_for(lambda: _chunk(settings, chunk.id).status == "running", timeout=120, what="the chunk rendering")

        celery = make_celery(settings)
        try:
            # The same task, by name, with the same payload: the idle worker takes it while the other renders.
            payload = ChunkPayload(job_id=job_id, chunk_id=chunk.id)
            CeleryDispatcher(celery).send(RENDER_CHUNK, payload, queue=render_queue("any"))
            body = wait_finished(api, job_id, farm)
            assert body["status"] == "succeeded", body
            CeleryDispatcher(celery).send(RENDER_CHUNK, payload, queue=render_queue("any"))  # and once more, late
            skipped = "not rendering (done, held"
            wait_for(
                lambda: sum(farm.log(k).count(skipped) for k in ("w1", "w2")) >= 2,
                timeout=60,
                what="both duplicates handled",
            )
        finally:
            celery.close()

        logs = {host: farm.log(key) for host, key in zip(hosts, ("w1", "w2"), strict=True)}
        assert all(f"Task {RENDER_CHUNK}[" in log for log in logs.values()), "both workers should have had the message"
        assert sum(log.count("rendering frames") for log in logs.values()) == 1, "rendered more than once"
        assert sum(log.count(skipped) for log in logs.values()) == 2
        after = _chunk(settings, chunk.id)
        assert after.attempts == 1
        first_skip = min(at for log in logs.values() for at in _logged_at(log, skipped))
        assert after.finished_at is not None and first_skip < after.finished_at, "the duplicate came after the render"
        _assert_counted_once(settings, job_id)
        assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip))


# -- 6. a chunk that fails every time ---------------------------------------------------------------------------

# A stand-in for ffmpeg on the workers' PATH (the process boundary the farm owns): it fails the encode of the second
# chunk of jobs cut into 45-frame chunks, every time, the way a broken encoder build or a bad frame would, and runs
# the real ffmpeg for everything else.
_FAULTY_FFMPEG = """#!/bin/sh
case " $* " in
  *" -frames:v 45 "*"/00001.mp4 "*|*" -s 328x184 "*"/00001.mp4 "*)
    echo "simulated encoder fault: cannot encode this chunk" >&2
    exit 1;;
esac
exec {ffmpeg} "$@"
"""


class TestAlwaysFailingChunk:
    @pytest.fixture
    def settings(self, settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
        return with_face_models(settings, data_dir, tmp_path)

    @pytest.mark.parametrize("pipeline", list(PIPELINES))
    def test_a_chunk_that_always_fails_fails_its_job_after_the_retries_and_no_other(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path, pipeline: str
    ) -> None:
        _always_failing_chunk(farm, api, settings, tmp_path, PIPELINES[pipeline])


def _always_failing_chunk(
    farm: Farm, api: TestClient, settings: Settings, tmp_path: Path, options: dict[str, Any]
) -> None:
    real = shutil.which("ffmpeg")
    assert real is not None
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "ffmpeg").write_text(_FAULTY_FFMPEG.format(ffmpeg=real))
    (shim / "ffmpeg").chmod(0o755)
    path = f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"
    bad_clip = make_clip(tmp_path / "bad.mp4", seconds=3, size="328x184")
    good_clip = make_clip(tmp_path / "good.mp4", seconds=3, size="320x180")
    farm.worker("w1", env={"PATH": path})
    farm.worker("w2", env={"PATH": path})
    bad = submit(api, bad_clip, {**options, "chunk_frames": 45})
    good = submit(api, good_clip, {**options, "chunk_frames": 30})

    failed = wait_finished(api, bad, farm)
    assert failed["status"] == "failed", failed
    assert failed["error"]["code"] == "ffmpeg_failed", failed["error"]
    assert "simulated encoder fault" in failed["error"]["message"], failed["error"]
    chunks = _chunks(settings, bad)
    assert chunks[1].status == "failed" and chunks[1].attempts == settings.max_attempts
    assert chunks[1].error_code == "ffmpeg_failed"
    assert all(c.status in {"done", "cancelled"} for c in chunks if c.index != 1)

    body = wait_finished(api, good, farm)
    assert body["status"] == "succeeded", body
    assert_frames_match(read_frames(download(api, good, tmp_path / "good-out.mp4")), read_frames(good_clip))
    assert all(farm.procs[k].poll() is None for k in ("w1", "w2")), "a failing chunk must not take a worker down"


# -- 7. a plan that takes longer than its lease -----------------------------------------------------------------


class TestPlanSlowerThanItsLease:
    @pytest.fixture
    def settings(self, settings: Settings) -> Settings:
        # Half the suite's lease and heartbeat: as many heartbeats to a lease, half the wait for each slow call.
        return settings.model_copy(update={"lease_seconds": 2, "heartbeat_seconds": 0.5, "reap_interval_seconds": 0.5})

    def test_a_plan_slower_than_its_lease_keeps_it_by_heartbeats_and_is_done_once(
        self, farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
    ) -> None:
        _plan_slower_than_its_lease(farm, api, settings, tmp_path)


def _plan_slower_than_its_lease(farm: Farm, api: TestClient, settings: Settings, tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=2, size="320x180")
    # Every ffprobe call of the worker lasts a lease: probing and indexing the target take two.
    farm.worker("w1", env=slow_tool(tmp_path / "bin", "ffprobe", settings.lease_seconds))
    farm.beat()
    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 1000})

    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    assert len(_events(settings, job_id, "planning")) == 1, "the plan was taken away and planned again"
    assert _events(settings, job_id, "requeued") == []
    assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip))
