"""Rows to resources: what a job, a chunk and an event look like to a client (which jobs a caller may see:
``shared.tenants.owned_job``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from api.schemas import ChunkCounts, ChunkView, ErrorDetail, EventView, JobView, ProgressView
from shared.events import EventKind
from shared.models import Chunk, Job, JobEvent, Tenant
from shared.progress import Progress
from shared.settings import Settings
from shared.states import ChunkStatus, JobStatus
from shared.tenants import Principal


def tenant_names(session: Session, caller: Principal, rows: Sequence[Job]) -> dict[str, str]:
    ids = {job.tenant_id for job in rows if job.tenant_id is not None} - {caller.tenant_id}
    names = {caller.tenant_id: caller.tenant_name}
    if ids:
        found = session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(ids))).all()
        names.update({tenant_id: name for tenant_id, name in found})
    return names


def job_view(job: Job, progress: Progress, settings: Settings, tenants: dict[str, str]) -> JobView:
    total = progress.frames_total
    done = total if job.status == JobStatus.SUCCEEDED and total is not None else progress.frames_done
    expires = None
    if job.finished_at is not None and job.expired_at is None:
        expires = job.finished_at + timedelta(seconds=settings.output_ttl_seconds)
    return JobView(
        id=job.id,
        status=JobStatus(job.status),
        priority=job.priority,
        progress=ProgressView(
            frames_done=done,
            frames_total=total,
            percent=round(100.0 * done / total, 1) if total else 0.0,
            frames_per_second=progress.frames_per_second,
            eta_seconds=progress.eta_seconds,
            recovering=progress.recovering,
        ),
        chunks=ChunkCounts(total=job.chunks_total or 0, **progress.chunks),
        error=ErrorDetail(code=job.error_code, message=job.error_message or "") if job.error_code else None,
        target_name=job.target_name,
        tenant=tenants.get(job.tenant_id) if job.tenant_id else None,
        retries=job.retries,
        wait_reason=job.wait_reason,
        group_id=job.group_id,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        output_expires_at=expires,
        expired=job.expired_at is not None,
        callback_url=job.callback_url,
    )


def page_progress(session: Session, rows: Sequence[Job]) -> dict[str, Progress]:
    """Progress of a page of jobs in one query (no rate or ETA: that is the single job's view)."""
    counts: dict[str, dict[str, int]] = {job.id: {str(s): 0 for s in ChunkStatus} for job in rows}
    frames: dict[str, int] = {job.id: 0 for job in rows}
    if rows:
        grouped = session.execute(
            select(Chunk.job_id, Chunk.status, func.count(), func.coalesce(func.sum(Chunk.frames_done), 0))
            .where(Chunk.job_id.in_([job.id for job in rows]))
            .group_by(Chunk.job_id, Chunk.status)
        ).all()
        for job_id, status, count, done in grouped:
            counts[job_id][str(status)] = int(count)
            frames[job_id] += int(done)
    return {job.id: Progress(frames[job.id], job.frames_total, counts[job.id]) for job in rows}


def chunk_view(chunk: Chunk) -> ChunkView:
    return ChunkView(
        index=chunk.index,
        frame_start=chunk.frame_start,
        frame_end=chunk.frame_end,
        status=ChunkStatus(chunk.status),
        attempts=chunk.attempts,
        frames_done=chunk.frame_count if chunk.status == ChunkStatus.DONE else chunk.frames_done,
        worker=chunk.worker,
        error=ErrorDetail(code=chunk.error_code, message=chunk.error_message or "") if chunk.error_code else None,
        started_at=chunk.started_at,
        finished_at=chunk.finished_at,
        render_seconds=chunk.render_seconds,
    )


def event_view(event: JobEvent) -> EventView:
    return EventView(
        id=event.id,
        at=event.at,
        kind=EventKind(event.kind),
        status=JobStatus(event.status) if event.status else None,
        chunk_index=event.chunk_index,
        attempt=event.attempt,
        worker=event.worker,
        error_code=event.error_code,
        message=event.message,
    )
