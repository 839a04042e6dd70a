"""A job's progress: frames rendered, chunks by state, the farm's rate on it and whether it is recovering; and a
job group's ETA (:func:`group_eta`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from shared.events import RECOVERY_EVENTS, START_EVENTS
from shared.limits import submitted_frames
from shared.media import MediaInfo
from shared.models import Chunk, Job, JobEvent, utcnow
from shared.options import JobOptions
from shared.states import ACTIVE_JOB_STATES, FINISHED_JOB_STATES, ChunkStatus, JobStatus


@dataclass(frozen=True)
class Progress:
    frames_done: int
    frames_total: int | None
    chunks: dict[str, int]
    frames_per_second: float | None = None  # the farm's measured rate on this job, while it renders
    eta_seconds: float | None = None  # None while recovering: the rate measured before a loss says nothing now
    recovering: bool = False


def rendered(session: Session, job_id: str) -> tuple[int, dict[str, int]]:
    """Frames rendered so far (finished chunks plus the running ones' heartbeats) and the job's chunks by state: one
    query, what a progress bar polls (``swapfarm run``)."""
    rows = session.execute(
        select(Chunk.status, func.count(), func.coalesce(func.sum(Chunk.frames_done), 0))
        .where(Chunk.job_id == job_id)
        .group_by(Chunk.status)
    ).all()
    counts = {str(status): 0 for status in ChunkStatus}
    frames = 0
    for status, count, done in rows:
        counts[str(status)] = int(count)
        frames += int(done)
    return frames, counts


def progress_of(session: Session, job: Job) -> Progress:
    """Frames rendered so far and chunks by state (:func:`rendered`), the farm's rate on the job, and whether it is
    recovering from a loss (:func:`recovering`), in which case it has no ETA."""
    frames, counts = rendered(session, job.id)
    fps = _throughput(session, job.id) if job.status == JobStatus.RENDERING else None
    waiting_on_recovery = recovering(session, job)
    eta = None
    if fps and job.frames_total is not None and not waiting_on_recovery:
        eta = round(max(job.frames_total - frames, 0) / fps, 1)
    return Progress(
        frames_done=frames,
        frames_total=job.frames_total,
        chunks=counts,
        frames_per_second=fps,
        eta_seconds=eta,
        recovering=waiting_on_recovery,
    )


def recovering(session: Session, job: Job) -> bool:
    """Whether the job waits on a recovery, so that its progress says nothing about when it ends: a running
    chunk's lease is overdue (its worker stopped heartbeating), or since the latest step a worker started the
    job's work was re-queued or re-sent, or the broker was found unreachable (``shared.events.RECOVERY_EVENTS``)."""
    if job.status not in ACTIVE_JOB_STATES:
        return False
    overdue = session.scalar(
        select(Chunk.id)
        .where(Chunk.job_id == job.id, Chunk.status == ChunkStatus.RUNNING, Chunk.lease_expires_at < utcnow())
        .limit(1)
    )
    if overdue is not None:
        return True
    last_recovery, last_start = session.execute(
        select(
            func.max(case((JobEvent.kind.in_(RECOVERY_EVENTS), JobEvent.id))),
            func.max(case((JobEvent.kind.in_(START_EVENTS), JobEvent.id))),
        ).where(JobEvent.job_id == job.id)
    ).one()
    return last_recovery is not None and (last_start is None or last_recovery > last_start)


def _throughput(session: Session, job_id: str) -> float | None:
    """Frames per second of the farm on this job: the rate one chunk renders at (measured on the finished
    chunks and the running ones so far) times the chunks rendering now."""
    done_frames, done_seconds = session.execute(
        select(
            func.coalesce(func.sum(Chunk.frame_end - Chunk.frame_start), 0),
            func.coalesce(func.sum(Chunk.render_seconds), 0.0),
        ).where(Chunk.job_id == job_id, Chunk.status == ChunkStatus.DONE, Chunk.render_seconds.is_not(None))
    ).one()
    running = session.execute(
        select(Chunk.frames_done, Chunk.started_at).where(Chunk.job_id == job_id, Chunk.status == ChunkStatus.RUNNING)
    ).all()
    now = utcnow()
    frames = int(done_frames) + sum(int(f) for f, _ in running)
    seconds = float(done_seconds or 0.0) + sum((now - at).total_seconds() for _, at in running if at is not None)
    if frames <= 0 or seconds <= 0:
        return None
    return round(frames / seconds * max(len(running), 1), 2)


# A member in one of these waits for a person (resume, approve): no rate says when the group ends.
_WAITS_FOR_A_PERSON = frozenset({JobStatus.PAUSED, JobStatus.AWAITING_APPROVAL})


def group_eta(members: Sequence[tuple[Job, Progress]]) -> float | None:
    """Seconds until a group's last member ends: the frames its unfinished members have left (a member not yet
    planned: its range judged from the target's header and the trim, as at submission) over the rate its rendering
    members render at together, and never less than the slowest rendering member's own ETA. Members waiting for a
    place take the places of those that end, so the group's rate holds until its last member renders.

    ``None`` while no member renders (no rate is measured yet), one is recovering (``Progress.recovering``), or one
    is paused or awaiting approval (it waits for a person); and once every member has ended.
    """
    unfinished = [(job, p) for job, p in members if job.status not in FINISHED_JOB_STATES]
    rendering = [p for job, p in unfinished if job.status == JobStatus.RENDERING]
    if not rendering or any(job.status in _WAITS_FOR_A_PERSON for job, _ in unfinished):
        return None
    if any(p.recovering or not p.frames_per_second for p in rendering):
        return None
    left = 0
    for job, p in unfinished:
        total = _frames_of(job)
        if total is None:
            return None
        left += max(total - p.frames_done, 0)
    rate = sum(p.frames_per_second or 0.0 for p in rendering)
    slowest = max((p.eta_seconds for p in rendering if p.eta_seconds is not None), default=0.0)
    return round(max(left / rate, slowest), 1)


def _frames_of(job: Job) -> int | None:
    """The frames the job renders: counted by its planner, else judged from its target's header and trim."""
    if job.frames_total is not None:
        return job.frames_total
    if job.media is None:
        return None
    return submitted_frames(MediaInfo.from_json(job.media), JobOptions.model_validate(job.options))
