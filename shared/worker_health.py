"""Bad workers kept out, and jobs routed by tags: which worker may take which job's chunks.

The rules (one place; the claim in ``shared.fairness`` and the failure in ``shared.jobs`` call them):

* a chunk attempt that fails on a worker for a reason that is not the input's (an :class:`InputError` never counts)
  is a :class:`WorkerFailure` row, written in the transaction that records the failed attempt;
* **soft fail**: a chunk that failed on a worker goes to another worker when one that could take it is live;
* **blocklist**: a worker with ``blocklist_after`` failures on one job takes no more chunks of that job while
  another live worker could take them (a ``worker_blocklisted`` event when it happens); with none left it goes on,
  and the attempt limit ends the job;
* **quarantine**: a worker with failures on ``quarantine_after_jobs`` jobs within ``quarantine_window_seconds``
  (since its last release) takes no work at all until an admin releases it (:func:`release`) or it restarts with
  a healthy self-test (``workers.selftest``): a ``worker_quarantined`` event on the job that tipped it, a metric
  and a line on the console's workers page. A worker that starts with a healthy self-test starts with a clean
  slate (:func:`fresh_start`): its failures before count no more;
* **tags**: a job's ``required_tags`` narrow the workers of its family to those started with every one of them. A
  job no live worker can take waits with ``wait_reason`` ``no_worker_with_tags`` (and one event saying so) until
  a worker with the tags takes a chunk.

A live worker: announced (``workers.presence``), not stopped, seen within a lease.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from shared.db import session_scope
from shared.errors import (
    ForbiddenError,
    InputError,
    NotFoundError,
    NotQuarantinedError,
    NoWorkerWithTagsError,
    SwapfarmError,
    TooManyFailedChunksError,
    WorkerBlocklistedError,
    WorkerQuarantinedError,
)
from shared.events import EventKind, record
from shared.models import Chunk, Job, WorkerFailure, WorkerPresence, utcnow
from shared.options import JobOptions
from shared.settings import Settings
from shared.tenants import Principal

logger = logging.getLogger(__name__)

__all__ = [
    "Health",
    "blocked_jobs",
    "join_tags",
    "note_no_worker",
    "others_can_take",
    "quarantined",
    "record_failure",
    "release",
    "release_worker",
    "fresh_start",
    "tags_fit",
    "untakeable_jobs",
]


def join_tags(tags: Iterable[str]) -> str:
    """Tags as a row stores them: sorted, unique, comma-joined ("" for none)."""
    return ",".join(sorted(set(tags)))


def tags_fit(required: str, offered: str) -> bool:
    """Whether a worker offering ``offered`` (a row's tags) has every tag of ``required``."""
    need = {t for t in required.split(",") if t}
    return need <= {t for t in offered.split(",") if t}


@dataclass(frozen=True)
class Health:
    """What a failure did to its worker."""

    counted: bool = False  # False: the input's fault, or no worker named
    blocklisted: bool = False  # this failure blocklisted the worker for the job
    quarantined: bool = False  # this failure quarantined the worker
    job_failures: int = 0  # the job's failures that count (every worker)
    too_many: SwapfarmError | None = None  # the job's max_failed_chunks reached: the error it fails with


def record_failure(session: Session, settings: Settings, chunk: Chunk, job: Job | None, error: SwapfarmError) -> Health:
    """Record a failed attempt of ``chunk`` against its worker unless it is the input's fault; blocklist and
    quarantine the worker when the failure crosses the limits (events in the caller's transaction); and, when the
    job's ``max_failed_chunks`` attempts have now failed, the error the job fails with instead of burning the rest
    of its retries (``Health.too_many``)."""
    worker, job_id, chunk_index = chunk.worker, chunk.job_id, chunk.index
    if worker is None or isinstance(error, InputError):
        return Health()
    health = _record(session, settings, worker, job_id, chunk_index, error)
    limit = JobOptions.model_validate(job.options).max_failed_chunks if job is not None else None
    if limit is None or health.job_failures < limit:
        return health
    too_many = TooManyFailedChunksError(
        f"{health.job_failures} chunk attempts failed, the job's max_failed_chunks ({limit}); last: {error.code}"
    )
    return replace(health, too_many=too_many)


def _record(
    session: Session, settings: Settings, worker: str, job_id: str, chunk_index: int, error: SwapfarmError
) -> Health:
    now = utcnow()
    session.add(WorkerFailure(worker=worker, job_id=job_id, chunk_index=chunk_index, error_code=error.code, at=now))
    session.flush()
    row = session.get(WorkerPresence, worker, with_for_update=True)
    released = row.released_at if row is not None else None
    counted = WorkerFailure.at > released if released is not None else WorkerFailure.id.is_not(None)
    mine = select(func.count()).select_from(WorkerFailure).where(WorkerFailure.worker == worker, counted)
    on_job = session.scalar(mine.where(WorkerFailure.job_id == job_id)) or 0
    blocklisted = on_job == settings.blocklist_after
    if blocklisted:
        record(
            session, job_id, EventKind.WORKER_BLOCKLISTED, worker=worker, error_code=WorkerBlocklistedError.code,
            message=f"worker {worker} failed {on_job} chunks of this job: it takes no more of them",
        )  # fmt: skip
    total = session.scalar(select(func.count()).select_from(WorkerFailure).where(WorkerFailure.job_id == job_id)) or 0
    if row is None or row.quarantined_at is not None:
        return Health(True, blocklisted, False, total)
    window = WorkerFailure.at >= now - timedelta(seconds=settings.quarantine_window_seconds)
    several = select(func.count(func.distinct(WorkerFailure.job_id))).where(WorkerFailure.worker == worker, counted)
    jobs = session.scalar(several.where(window)) or 0
    if jobs < settings.quarantine_after_jobs:
        return Health(True, blocklisted, False, total)
    reason = f"failed chunks of {jobs} jobs within {settings.quarantine_window_seconds:.0f}s (last: {error.code})"
    row.quarantined_at, row.quarantine_reason = now, reason
    record(
        session, job_id, EventKind.WORKER_QUARANTINED, worker=worker, error_code=WorkerQuarantinedError.code,
        message=f"worker {worker} quarantined: {reason}; it takes no work until released",
    )  # fmt: skip
    return Health(True, blocklisted, True, total)


def quarantined(session: Session, worker: str) -> bool:
    return session.scalar(select(WorkerPresence.quarantined_at).where(WorkerPresence.name == worker)) is not None


def release(session: Session, worker: str, reason: str) -> bool:
    """Release a quarantined worker (its earlier failures stop counting: towards a quarantine and its blocklists);
    ``False`` when it was not quarantined."""
    done = session.execute(
        update(WorkerPresence)
        .where(WorkerPresence.name == worker, WorkerPresence.quarantined_at.is_not(None))
        .values(quarantined_at=None, quarantine_reason=f"released: {reason}"[:500], released_at=utcnow())
        .returning(WorkerPresence.name)
    ).first()
    return done is not None


def fresh_start(session: Session, worker: str) -> bool:
    """A worker started and passed its self-test: its earlier failures count no more (as after a release); and a
    quarantined one is released. ``True`` when it was quarantined."""
    row = session.get(WorkerPresence, worker, with_for_update=True)
    if row is None:
        return False
    held = row.quarantined_at is not None
    row.released_at = utcnow()
    if held:
        row.quarantined_at, row.quarantine_reason = None, "released: restarted with a healthy self-test"
    return held


def blocked_jobs(session: Session, worker: str, blocklist_after: int, job_ids: Sequence[str]) -> set[str]:
    """The jobs of ``job_ids`` that ``worker`` is blocklisted for (by failures since its last release: a worker
    released is trusted again)."""
    if not job_ids:
        return set()
    released = session.scalar(select(WorkerPresence.released_at).where(WorkerPresence.name == worker))
    rows = session.execute(
        select(WorkerFailure.job_id)
        .where(WorkerFailure.worker == worker, WorkerFailure.job_id.in_(job_ids))
        .where(WorkerFailure.at > released if released is not None else WorkerFailure.id.is_not(None))
        .group_by(WorkerFailure.job_id)
        .having(func.count() >= blocklist_after)
    ).all()
    return {r[0] for r in rows}


def _live(session: Session, settings: Settings) -> list[WorkerPresence]:
    seen = utcnow() - timedelta(seconds=max(settings.lease_seconds, 3 * settings.heartbeat_seconds))
    return list(
        session.scalars(
            select(WorkerPresence).where(
                WorkerPresence.stopped_at.is_(None),
                WorkerPresence.last_seen_at >= seen,
                WorkerPresence.quarantined_at.is_(None),
            )
        )
    )


def _can_take(session: Session, settings: Settings, row: WorkerPresence, job: Job) -> bool:
    if job.family not in ("any", row.family) or not tags_fit(job.required_tags, row.tags):
        return False
    return not blocked_jobs(session, row.name, settings.blocklist_after, [job.id])


def others_can_take(session: Session, settings: Settings, job_id: str, me: str) -> bool:
    """Whether a live worker other than ``me`` could take the job's chunks (soft fail: a chunk that failed on
    ``me`` waits for it)."""
    job = session.get(Job, job_id)
    return job is not None and any(
        _can_take(session, settings, r, job) for r in _live(session, settings) if r.name != me
    )


def untakeable_jobs(
    session: Session, settings: Settings, *, worker: str, tags: str, job_ids: Sequence[str]
) -> set[str]:
    """The jobs of ``job_ids`` that ``worker`` (offering ``tags``) may not take: tags missing, or blocklisted."""
    if not job_ids:
        return set()
    rows = session.execute(select(Job.id, Job.required_tags).where(Job.id.in_(job_ids))).all()
    refused = {r[0] for r in rows if not tags_fit(r[1] or "", tags)}
    # blocklisted, where another live worker could take the job: with none left, the worker goes on and the
    # attempt limit ends the job, which would otherwise wait for ever
    blocked = blocked_jobs(session, worker, settings.blocklist_after, job_ids)
    return refused | {job_id for job_id in blocked if others_can_take(session, settings, job_id, worker)}


def note_no_worker(session: Session, settings: Settings, job_id: str) -> bool:
    """When no live worker has the tags the job requires, say so once: ``wait_reason`` ``no_worker_with_tags``
    and a ``waiting_for_worker`` event; ``True`` when this call said it."""
    job = session.get(Job, job_id)
    if job is None or not job.required_tags or job.wait_reason is not None:
        return False
    if any(job.family in ("any", r.family) and tags_fit(job.required_tags, r.tags) for r in _live(session, settings)):
        return False
    said = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.wait_reason.is_(None))
        .values(wait_reason=NoWorkerWithTagsError.code)
        .returning(Job.id)
    ).first()
    if said is None:
        return False
    record(
        session, job_id, EventKind.WAITING_FOR_WORKER, error_code=NoWorkerWithTagsError.code,
        message=f"no live worker has the tags {job.required_tags.replace(',', ', ')}; the job waits for one",
    )  # fmt: skip
    return True


def clear_wait(session: Session, job_id: str) -> None:
    """A worker took the job's work: it no longer waits for one."""
    session.execute(update(Job).where(Job.id == job_id, Job.wait_reason.is_not(None)).values(wait_reason=None))


def release_worker(settings: Settings, caller: Principal, name: str) -> None:
    """An admin releases a quarantined worker: it takes work again, its earlier failures no longer count towards
    a quarantine or a blocklist.

    Raises:
        ForbiddenError: the key is not an admin key.
        NotFoundError: no worker of that name.
        NotQuarantinedError: ``worker_not_quarantined``.
    """
    if not caller.admin:
        raise ForbiddenError("releasing a worker needs an admin key")
    with session_scope(settings.database_url) as session:
        if session.get(WorkerPresence, name) is None:
            raise NotFoundError(f"no worker named {name!r}")
        if not release(session, name, "by an admin"):
            raise NotQuarantinedError(f"worker {name!r} is not quarantined")
    logger.warning("worker %s: released from quarantine by an admin", name)
