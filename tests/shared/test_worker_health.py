"""The rules that keep bad workers out (``shared.worker_health``), on the real schema: input errors never count."""

from __future__ import annotations

from sqlalchemy import func, select

from shared.db import session_scope
from shared.errors import FfmpegError, MediaFormatError, TruncatedMediaError
from shared.models import Chunk, WorkerFailure, WorkerPresence, new_id
from shared.settings import Settings
from shared.worker_health import blocked_jobs, quarantined, record_failure, release, tags_fit


def _worker(settings: Settings) -> str:
    name = f"w-{new_id()[:8]}@test"
    with session_scope(settings.database_url) as s:
        s.add(WorkerPresence(name=name, hostname="test", family="cpu"))
    return name


def _chunk(worker: str, job_id: str, index: int) -> Chunk:
    """The chunk row a failed attempt was of, as the failing transaction holds it (not stored here)."""
    return Chunk(worker=worker, job_id=job_id, index=index, frame_start=0, frame_end=1, seek_seconds=0.0)


def test_input_errors_never_count_against_a_worker(settings: Settings) -> None:
    worker = _worker(settings)
    jobs = [new_id(), new_id(), new_id()]
    with session_scope(settings.database_url) as s:
        for job_id in jobs:  # the input's fault, on three jobs: nothing counted, nothing blocked
            for _ in range(3):
                health = record_failure(s, settings, _chunk(worker, job_id, 0), None, MediaFormatError("not a video"))
                assert not health.counted
    with session_scope(settings.database_url) as s:
        count = s.scalar(select(func.count()).select_from(WorkerFailure).where(WorkerFailure.worker == worker))
        assert count == 0 and not quarantined(s, worker) and blocked_jobs(s, worker, 1, jobs) == set()


def test_failures_blocklist_for_the_job_then_quarantine_and_a_release_trusts_the_worker_again(
    settings: Settings,
) -> None:
    worker = _worker(settings)
    first, second = new_id(), new_id()
    with session_scope(settings.database_url) as s:
        one = record_failure(s, settings, _chunk(worker, first, 0), None, FfmpegError("x"))
        two = record_failure(s, settings, _chunk(worker, first, 1), None, TruncatedMediaError("x"))
        assert (one.blocklisted, two.blocklisted, two.quarantined) == (False, True, False)
        assert blocked_jobs(s, worker, settings.blocklist_after, [first, second]) == {first}
        three = record_failure(s, settings, _chunk(worker, second, 0), None, FfmpegError("x"))
        assert three.quarantined and not three.blocklisted
    with session_scope(settings.database_url) as s:
        assert quarantined(s, worker)
        assert release(s, worker, "by an admin") and not release(s, worker, "again")
    with session_scope(settings.database_url) as s:
        assert not quarantined(s, worker) and blocked_jobs(s, worker, settings.blocklist_after, [first]) == set()


def test_tags_narrow_the_workers() -> None:
    assert tags_fit("", "") and tags_fit("", "studio-a")
    assert tags_fit("48gb,studio-a", "48gb,spare,studio-a")
    assert not tags_fit("48gb,studio-a", "studio-a")
