"""The reaper: hand abandoned and lost work back to the queues, from what Postgres says (``shared.reaper``).

``swapfarm beat`` runs it in a loop of its own every ``reap_interval_seconds`` (:func:`run`), so a sweep never
waits behind chunks in a queue and goes on while the broker is away. Each sweep:

1. reclaims expired leases: the chunks of workers that stopped heartbeating go back to ``queued``, abandoned plans
   and stitches are sent again;
2. compares the work Postgres says is queued with what the broker holds, and re-sends what the broker lost (a
   restart without persistence, a submission that could not reach it) as soon as it answers again. It looks
   twice, a moment apart, before re-sending, and a duplicate would do no harm anyway: every step claims its row
   first. While the broker does not answer, every job that has not ended is told once (``broker_unreachable``);
3. admits the tenants' waiting jobs that have a place (a safety net under the admission done by whoever ends a job)
   and deletes the files of jobs past the retention time (``output_ttl_seconds``).

Every ``webhook_poll_seconds`` the loop also sends the webhook outbox's relay task, which a worker runs.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING

from sqlalchemy.exc import OperationalError

from shared import control, lifecycle, reaper
from shared.broker import broker_contents
from shared.db import session_scope
from shared.dispatch import send_all
from shared.models import Job
from shared.reaper import ReapResult
from shared.tasks import DELIVER_WEBHOOKS, PLAN, RENDER_CHUNK, STITCH, TASKS, message
from workers import degradations
from workers.runtime import Runtime
from workers.stitching import delete_chunks

if TYPE_CHECKING:
    from celery import Celery

    from shared.settings import Settings

logger = logging.getLogger(__name__)

# Between the two looks at the broker before anything is re-sent: longer than a worker takes from popping a
# message to recording it as unacknowledged (a pipelined Redis write).
CONFIRM_SECONDS = 0.5


class Reaper:
    """Sweeps for abandoned and lost work; remembers between sweeps whether the broker answered.

    ``celery``: the application whose broker is compared with Postgres; ``None`` (or a broker other than Redis)
    falls back to re-sending what waited longer than ``requeue_after_seconds``.
    """

    def __init__(self, rt: Runtime, celery: Celery | None = None) -> None:
        self.rt, self.celery = rt, celery
        self.broker_down = False

    def sweep(self) -> ReapResult:
        settings = self.rt.settings
        limit = settings.max_running_jobs_per_tenant
        with session_scope(self.rt.db) as session:
            result = reaper.reclaim_expired(session, max_attempts=settings.max_attempts, default_limit=limit)
        self._send(result)
        lost = self._reconcile()
        self._send(lost)
        result += lost
        for job_id in result.failed:
            logger.error("job %s: failed past the attempt limit", job_id)
        with session_scope(self.rt.db) as session:
            admitted = result.admitted + lifecycle.admit_all(session, limit)
        try:
            send_all(self.rt.dispatcher, admitted)
        except Exception as exc:  # the broker is away: the admitted jobs are queued in Postgres, re-sent later
            logger.warning("could not send %d admitted jobs (%s); re-sent once the broker answers", len(admitted), exc)
        _expire(self.rt)
        _expire_previews(self.rt)
        _leftover_chunks(self.rt)
        return result

    def _reconcile(self) -> ReapResult:
        """Re-send the queued work the broker does not hold; tell the jobs once when the broker does not answer."""
        settings = self.rt.settings
        if self.celery is None:
            return self._stale()
        try:
            first = broker_contents(self.celery)
        except Exception as exc:  # whatever the transport raises while the broker is away
            self._unreachable(exc)
            return ReapResult()
        if first is None:
            return self._stale()
        if self.broker_down:
            logger.warning("the broker answers again; comparing its queues with the database")
            self.broker_down = False
        taken_within = settings.lease_seconds
        with session_scope(self.rt.db) as session:
            candidates = reaper.missing(session, first, taken_within=taken_within)
        if not candidates:
            return ReapResult()
        time.sleep(CONFIRM_SECONDS)  # a message between a worker's pop and its unacked record shows up by now
        try:
            second = broker_contents(self.celery)
        except Exception as exc:
            self._unreachable(exc)
            return ReapResult()
        assert second is not None
        with session_scope(self.rt.db) as session:
            still = {work.key for work in reaper.missing(session, second, taken_within=taken_within)}
            confirmed = [work for work in candidates if work.key in still]
            result = reaper.resend(session, confirmed)
        if confirmed:
            logger.warning(
                "the broker held no message for %d queued steps of %d jobs; re-sending them",
                len(confirmed),
                len({w.job_id for w in confirmed}),
            )
        return result

    def _stale(self) -> ReapResult:
        with session_scope(self.rt.db) as session:
            return reaper.resend_stale(session, requeue_after=self.rt.settings.requeue_after_seconds)

    def _unreachable(self, exc: Exception) -> None:
        if self.broker_down:
            return
        self.broker_down = True
        reason = f"{type(exc).__name__}: {exc}"[:200]
        logger.warning("the broker does not answer (%s); queued work is re-sent when it is back", reason)
        with session_scope(self.rt.db) as session:
            reaper.note_broker_unreachable(session, reason)

    def _send(self, result: ReapResult) -> None:
        """Send what a sweep decided. A send the broker refuses is left to the next sweeps: the work is queued in
        Postgres, so it is found missing from the broker once the broker answers."""
        ids = {*result.plan, *result.stitch, *(job_id for job_id, _ in result.render)}
        if not ids:
            return
        with session_scope(self.rt.db) as session:
            rows = {job_id: session.get_one(Job, job_id) for job_id in ids}
            families = {job_id: job.family for job_id, job in rows.items()}
            priorities = {job_id: job.priority for job_id, job in rows.items()}
        dispatcher, unsent = self.rt.dispatcher, 0
        sends = [
            *((f"job {j}: re-sending plan", PLAN, j, None) for j in result.plan),
            *((f"job {j} chunk {c}: re-sending render", RENDER_CHUNK, j, c) for j, c in result.render),
            *((f"job {j}: re-sending stitch", STITCH, j, None) for j in result.stitch),
        ]
        for line, task, job_id, chunk_id in sends:
            logger.warning("%s", line)
            again = message(task, job_id, chunk_id=chunk_id, family=families[job_id], priority=priorities[job_id])
            try:
                send_all(dispatcher, [again])
            except Exception as exc:
                unsent += 1
                logger.debug("%s failed: %s", line, exc)
        if unsent:
            logger.warning("%d messages could not be sent (broker unreachable); re-sent once it answers", unsent)


def reap(rt: Runtime, celery: Celery | None = None) -> ReapResult:
    """One sweep (see :class:`Reaper`)."""
    return Reaper(rt, celery).sweep()


def run(settings: Settings, stop: threading.Event | None = None) -> None:
    """The reaper's loop (``swapfarm beat``): a sweep every ``reap_interval_seconds`` until SIGTERM/SIGINT or
    ``stop``. A sweep that fails (the database is away) is logged; the next one tries again."""
    from shared.broker import make_celery
    from shared.dispatch import CeleryDispatcher
    from shared.storage import Storage

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    celery = make_celery(settings)
    rt = Runtime(
        settings=settings,
        storage=Storage.from_settings(settings),
        dispatcher=CeleryDispatcher(celery),
        hostname=f"reaper@{socket.gethostname()}",
        family=settings.queue_family,
    )
    sweeper = Reaper(rt, celery)
    logger.info(
        "reaper: a sweep every %.1fs (leases of %.0fs, heartbeats every %.0fs)",
        settings.reap_interval_seconds,
        settings.lease_seconds,
        settings.heartbeat_seconds,
    )
    next_relay = 0.0
    try:
        while not stop.is_set():
            try:
                sweeper.sweep()
            except OperationalError:
                logger.warning("reap skipped: the database is unavailable; the next sweep tries again")
            except Exception:
                logger.exception("reap failed; the next sweep tries again")
            if time.monotonic() >= next_relay:
                _relay_webhooks(celery, settings)
                next_relay = time.monotonic() + settings.webhook_poll_seconds
            stop.wait(settings.reap_interval_seconds)
    finally:
        celery.close()
    logger.info("reaper: stopped")


def _relay_webhooks(celery: Celery, settings: Settings) -> None:
    """Ask a worker to deliver the webhook outbox's due events (``workers.webhook_delivery``). A tick no worker
    takes in time expires; the next one covers it, and a tick lost with the broker loses nothing: the outbox is in
    Postgres."""
    try:
        queue = TASKS[DELIVER_WEBHOOKS].queue
        celery.send_task(DELIVER_WEBHOOKS, queue=queue, expires=max(settings.webhook_poll_seconds * 2, 5.0))
    except Exception as exc:  # the broker is away: the sweep has said so already
        logger.debug("webhook relay tick not sent: %s", exc)


def _expire(rt: Runtime) -> None:
    """Delete the files of jobs finished longer ago than the retention time; a job is marked expired only once
    its files are gone. A deletion that fails is a ``expiry_failed`` warning on the job (log, metric, event) and
    is tried again at the next tick."""
    ttl = rt.settings.output_ttl_seconds
    with session_scope(rt.db) as session:
        due = control.expire_due(session, ttl)
    for job_id in due:
        logger.info("job %s: retention time over; deleting its files", job_id)
        try:
            rt.storage.delete(rt.storage.job_url(job_id), recursive=True)
        except Exception as exc:
            notice = degradations.report(
                "expiry_failed",
                f"the job's files could not be deleted after the retention time ({type(exc).__name__}); "
                "deleting them is tried again",
            )
            logger.warning("job %s: could not delete its files", job_id, exc_info=True)
            degradations.record(rt.db, job_id, [notice])
            continue
        with session_scope(rt.db) as session:
            control.mark_expired(session, job_id, ttl)


def _expire_previews(rt: Runtime) -> None:
    """Cancel the previews not approved within ``preview_ttl_seconds`` and delete their files (a deletion that
    fails is logged; the job is cancelled either way, as a cancel by its user is)."""
    with session_scope(rt.db) as session:
        cancelled, outcome = control.expire_previews(session, rt.settings.max_running_jobs_per_tenant)
    send_all(rt.dispatcher, outcome.messages)
    for job_id in cancelled:
        logger.info("job %s: its preview was not approved in time; cancelled, deleting its files", job_id)
        try:
            rt.storage.delete(rt.storage.job_url(job_id), recursive=True)
        except Exception:
            logger.warning("job %s: could not delete its files", job_id, exc_info=True)


def _leftover_chunks(rt: Runtime) -> None:
    """Delete the chunk files of succeeded jobs whose stitcher stopped (killed, its machine gone) after publishing
    the output and before deleting them; a lease's length after the job succeeded, so a live stitcher's own
    deletion comes first. A deletion that fails is logged and tried again at the next tick."""
    with session_scope(rt.db) as session:
        due = control.leftover_chunks(session, grace_seconds=rt.settings.lease_seconds)
    for job_id in due:
        logger.info("job %s: deleting the chunk files its stitch left", job_id)
        try:
            delete_chunks(rt, job_id)
        except Exception:
            logger.warning("job %s: could not delete its chunk files", job_id, exc_info=True)
