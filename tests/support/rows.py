"""Jobs put in a state directly through ``shared.jobs``, for tests and benchmarks of the row changes."""

from __future__ import annotations

from shared import jobs
from shared.db import session_scope
from shared.models import new_id
from shared.options import JobOptions


def new_job(url: str) -> str:
    """A new passthrough job (no tenant), queued: its id."""
    job_id = new_id()
    with session_scope(url) as s:
        jobs.create_job(
            s, job_id=job_id, options=JobOptions(processors=["passthrough"]), target_url="file:///t.mp4",
            source_urls=[], target_name="t.mp4",
        )  # fmt: skip
    return job_id


def planned_job(url: str, chunks: int, *, lease_seconds: float = 60, family: str = "any") -> tuple[str, list[str]]:
    """A new passthrough job (no tenant) planned into ``chunks`` chunks of 10 frames for ``family``'s workers, all
    queued: its id and the chunks' ids."""
    job_id = new_job(url)
    with session_scope(url) as s:
        token = jobs.begin_plan(s, job_id, lease_seconds)
        assert token is not None
    plans = [jobs.ChunkPlan(i, i * 10, i * 10 + 10, i / 3) for i in range(chunks)]
    with session_scope(url) as s:
        ids = jobs.record_plan(s, job_id, token, plans, {}, family)
    return job_id, ids
