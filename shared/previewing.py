"""The worker's side of a preview (``preview: N``, :mod:`workers.previews`): once the preview's chunks are done the
job waits in ``awaiting_approval``; ``shared.control`` approves or rejects it.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared import webhooks
from shared.events import EventKind
from shared.jobs import lock_job
from shared.lifecycle import Note, transition
from shared.models import Chunk, Job, utcnow
from shared.states import ChunkStatus, JobStatus

__all__ = ["await_approval", "preview_rendered"]


def preview_rendered(session: Session, job_id: str) -> bool:
    """Whether the job's unfinished chunks are all held: its preview's chunks are done."""
    states = set(session.scalars(select(Chunk.status).where(Chunk.job_id == job_id).distinct()).all())
    return ChunkStatus.HELD in states and not states & {ChunkStatus.QUEUED, ChunkStatus.RUNNING}


def await_approval(session: Session, job_id: str, ttl_seconds: float) -> bool:
    """When the job's preview is rendered (:func:`preview_rendered`), move it to ``awaiting_approval`` until
    ``ttl_seconds`` from now, record its event and queue its webhook. ``True`` when this call did it.

    The one way into ``awaiting_approval``: from ``rendering`` (the worker that finished the preview's last chunk),
    or from ``waiting`` (a job resumed after its preview finished while it was paused, or whose preview finished
    while it waited for a place: a preview awaiting approval holds none). A paused job stays paused.
    """
    lock_job(session, job_id)
    if not preview_rendered(session, job_id):
        return False
    moved = transition(
        session, Job, JobStatus.AWAITING_APPROVAL, expected=(JobStatus.RENDERING, JobStatus.WAITING),
        where=[Job.id == job_id],
        values={"approval_due_at": utcnow() + timedelta(seconds=ttl_seconds)},
        note=Note(EventKind.AWAITING_APPROVAL, message="the preview is ready: approve or reject it"),
    )  # fmt: skip
    if moved:
        webhooks.enqueue(session, job_id, JobStatus.AWAITING_APPROVAL)
    return bool(moved)
