"""The distributed farm for real: API in-process, Celery workers and beat as processes, Postgres, Redis, ffmpeg."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from shared.db import session_scope
from shared.media import probe
from shared.models import Chunk
from shared.options import JobOptions
from shared.settings import Settings
from tests.integration.conftest import download, submit, wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.media import assert_frames_match, make_clip, read_frames, stream_info
from workers.local import run_local

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

LOSSLESS = {"processors": ["passthrough"], "encoder": {"lossless": True, "preset": "ultrafast"}}


def _chunks(settings: Settings, job_id: str) -> list[Chunk]:
    with session_scope(settings.database_url) as s:
        return list(s.scalars(select(Chunk).where(Chunk.job_id == job_id).order_by(Chunk.index)))


def _assert_same_video(output: Path, source: Path) -> None:
    assert_frames_match(read_frames(output), read_frames(source))
    out, src = probe(output), probe(source)
    frame = 1 / src.fps_value
    assert abs(out.duration - src.duration) <= frame + 1e-3
    info = stream_info(output)
    assert "audio" in info, "the output lost the audio"
    assert abs(float(info["audio"]["duration"]) - float(stream_info(source)["audio"]["duration"])) < 0.05


def test_chunk_boundaries_are_frame_exact_across_two_workers(
    farm: Farm, api: TestClient, settings: Settings, clip_30s: Path, tmp_path: Path
) -> None:
    hosts = {farm.worker("w1"), farm.worker("w2")}
    job_id = submit(api, clip_30s, {**LOSSLESS, "chunk_frames": 120})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    assert body["progress"] == {
        "frames_done": 900, "frames_total": 900, "percent": 100.0, "frames_per_second": None, "eta_seconds": None,
        "recovering": False,
    }  # fmt: skip
    chunks = _chunks(settings, job_id)
    assert len(chunks) >= 5
    assert {c.worker for c in chunks} == hosts, "both workers should have rendered chunks"
    _assert_same_video(download(api, job_id, tmp_path / "out.mp4"), clip_30s)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("vfr", {"vfr": True, "rate": "30"}), ("ntsc", {"rate": "30000/1001"})],
)
def test_variable_and_ntsc_frame_rates_keep_every_frame_and_the_duration(
    farm: Farm, api: TestClient, tmp_path: Path, name: str, kwargs: dict[str, object]
) -> None:
    clip = make_clip(tmp_path / f"{name}.mp4", seconds=8, **kwargs)  # type: ignore[arg-type]
    farm.worker("w1")
    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 45})
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    _assert_same_video(download(api, job_id, tmp_path / "out.mp4"), clip)


def test_the_local_run_gives_the_same_frames_as_the_farm(
    farm: Farm, api: TestClient, settings: Settings, clip_short: Path, tmp_path: Path
) -> None:
    farm.worker("w1")
    job_id = submit(api, clip_short, {**LOSSLESS, "chunk_frames": 30})
    assert wait_finished(api, job_id, farm)["status"] == "succeeded"
    distributed = read_frames(download(api, job_id, tmp_path / "farm.mp4"))
    result = run_local(
        target=clip_short,
        sources=[],
        output=tmp_path / "local.mp4",
        options=JobOptions.model_validate({**LOSSLESS, "chunk_frames": 30}),
        workers=2,
        settings=settings,
    )
    assert result.status == "succeeded"
    local = read_frames(tmp_path / "local.mp4")
    assert local.shape == distributed.shape
    assert (local == distributed).all()


def test_a_worker_killed_mid_chunk_loses_nothing(
    farm: Farm, api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    clip = make_clip(tmp_path / "clip.mp4", seconds=10, size="640x360")
    farm.worker("w1")
    farm.beat()
    job_id = submit(api, clip, {**LOSSLESS, "chunk_frames": 75})

    def running_on(host: str) -> Chunk | None:
        return next((c for c in _chunks(settings, job_id) if c.status == "running" and c.worker == host), None)

    for n in range(1, 6):  # until a kill lands mid-chunk: the chunk it held is still running, its attempt unfinished
        chunk = wait_for(lambda n=n: running_on(f"w{n}@test"), timeout=120, what=f"a chunk running on w{n}")
        assert isinstance(chunk, Chunk)
        farm.kill(f"w{n}")
        after = next(c for c in _chunks(settings, job_id) if c.id == chunk.id)
        if after.status == "running" and after.attempts == chunk.attempts:
            break
        farm.worker(f"w{n + 1}")
    else:
        raise AssertionError("no kill landed mid-chunk in five tries")
    farm.worker("survivor")
    body = wait_finished(api, job_id, farm)
    assert body["status"] == "succeeded", body
    chunks = _chunks(settings, job_id)
    assert any(c.attempts >= 2 for c in chunks), "the killed chunk should show a second attempt"
    assert all(c.status == "done" for c in chunks)
    assert_frames_match(read_frames(download(api, job_id, tmp_path / "out.mp4")), read_frames(clip))
