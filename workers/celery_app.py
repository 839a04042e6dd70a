"""The Celery application of the workers: its tasks, thin wrappers that take ids and call the steps.

Built by :func:`create_app` from settings (never at import time). CUDA and models are touched only inside the
task bodies, i.e. in the pool's child process, never in the prefork parent. The reaper does not run here: it
runs in ``swapfarm beat`` (``workers.reaping.run``); the ``reap`` task stays for whoever wants a sweep now. The
tasks are the table's (``shared.tasks.TASKS``), each running its step (``workers.steps``).
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from celery import Celery, signals
from celery.worker.consumer import Consumer as CeleryConsumer
from sqlalchemy.exc import OperationalError

from shared.broker import make_celery
from shared.dispatch import CeleryDispatcher
from shared.errors import LeaseLostError, RetryableError, WorkerNameTakenError
from shared.settings import Settings
from shared.storage import Storage
from shared.tasks import TASKS, TaskSpec
from workers import presence
from workers.engines.family import detect_family
from workers.metrics import WorkerMetrics, serve
from workers.runtime import Runtime
from workers.steps import run_step
from workers.video import codecs

logger = logging.getLogger(__name__)

_RETRY: dict[str, Any] = {
    "autoretry_for": (RetryableError, OperationalError),
    # a lost lease means another worker owns the work now: a retry would only find that out again
    "dont_autoretry_for": (LeaseLostError,),
    "retry_backoff": 2,
    "retry_backoff_max": 60,
    "retry_jitter": True,
    "max_retries": 20,
}


# How often a worker tries to reach a broker it lost (Celery backs off to 30 s between tries, which left a farm
# idle for up to half a minute after its broker came back).
RECONNECT_SECONDS = 1.0


class Consumer(CeleryConsumer):  # type: ignore[misc]  # Celery is untyped
    """Celery's consumer, trying to reach a lost broker every :data:`RECONNECT_SECONDS` instead of backing off."""

    def ensure_connected(self, conn: Any) -> Any:
        conn.ensure_connection = functools.partial(
            conn.ensure_connection,
            interval_start=RECONNECT_SECONDS,
            interval_step=0,
            interval_max=RECONNECT_SECONDS,
        )
        return super().ensure_connected(conn)


def refuse_duplicate(app: Celery, nodename: str, timeout: float = 1.0) -> None:
    """Refuse to start a second worker under a name a live worker answers to.

    Two workers under one name share one remote-control mailbox and one row in Flower: each answers for the other
    and the farm shows one worker where two run. A worker asks the farm for a ``ping`` from its own name before
    it starts. A broker that does not answer skips the check (the worker waits for the broker anyway); a worker
    of the solo pool busy with a task cannot answer pings, so it is not seen.

    Raises:
        WorkerNameTakenError: a worker named ``nodename`` answered.
    """
    try:
        replies = app.control.ping(destination=[nodename], timeout=timeout)
    except Exception as exc:  # the broker is away: nothing to compare with
        logger.warning("could not check whether worker name %s is free (%s)", nodename, type(exc).__name__)
        return
    if any(nodename in reply for reply in replies or ()):
        raise WorkerNameTakenError(
            f"a worker named {nodename} is already running; give this one another --name (e.g. gpu1@%h)"
        )


def queue_lines(app: Celery, names: list[str] | None = None) -> list[str]:
    """Each queue a worker consumes with its routing, as the banner lists them: ``render.cpu exchange=… key=…``."""
    queues = app.amqp.queues
    return [
        f"{q.name} exchange={q.exchange.name}({q.exchange.type}) key={q.routing_key}"
        for name in (names or list(queues))
        if (q := queues.get(name)) is not None
    ]


def create_app(settings: Settings) -> Celery:
    app = make_celery(settings)
    app.conf.worker_consumer = Consumer

    metrics = WorkerMetrics()
    _observe(app, settings, metrics)
    presence.register(app, settings)  # the jobs console's workers page
    if settings.warm_models:  # compile in each pool process as it starts (never in the prefork parent)
        signals.worker_process_init.connect(
            lambda **_: _warm(settings), weak=False, dispatch_uid=f"swapfarm-{id(app)}-warm-models"
        )

    # The codec probe (short ffmpeg processes, no CUDA) runs once as the worker starts, in its main process: the
    # pool's children inherit the result (``workers.video.codecs``).
    signals.worker_init.connect(lambda **_: codecs.probed(), weak=False, dispatch_uid=f"swapfarm-{id(app)}-codecs")

    @lru_cache(maxsize=4)
    def runtime(hostname: str) -> Runtime:
        family = detect_family(settings)
        return Runtime(
            settings=settings,
            storage=Storage.from_settings(settings),
            dispatcher=CeleryDispatcher(app),
            hostname=hostname,
            family=family,
            metrics=metrics,
            celery=app,
        )

    def rt_of(task: Any) -> Runtime:
        return runtime(task.request.hostname or socket.gethostname())

    for spec in TASKS.values():
        _register(app, spec, rt_of)
    return app


def _register(app: Celery, spec: TaskSpec, rt_of: Callable[[Any], Runtime]) -> None:
    """The Celery task of one entry of the table: the step of ``workers.steps``, with the table's retry policy."""

    def run(self: Any, **fields: Any) -> None:
        run_step(rt_of(self), spec.name, fields)

    run.__name__ = run.__qualname__ = spec.name.rsplit(".", 1)[-1]
    app.task(name=spec.name, bind=True, **(_RETRY if spec.retried else {}))(run)


def _warm(settings: Settings) -> None:
    from workers.warming import warm_in_background  # torch, if at all, only in the pool process

    warm_in_background(settings)


def _observe(app: Celery, settings: Settings, metrics: WorkerMetrics) -> None:
    """Hook logging and metrics into the worker's life (Celery signals; ``dispatch_uid`` keeps one hook per app).

    * Logging stays as the entry point configured it (JSON lines with job and chunk ids): a receiver of
      ``setup_logging`` tells Celery not to install its own handlers.
    * The metrics server starts in the process that runs tasks: each prefork child on ``port + its index``
      (``worker_process_init``), or the worker's only process for the solo and thread pools (``worker_ready``).
    * Celery autoretries count as ``swapfarm_retries_total{step="task"}``.
    """
    uid = f"swapfarm-{id(app)}"

    def keep_logging(**_: Any) -> None:
        return None

    def serve_in_child(**_: Any) -> None:
        from billiard.process import current_process

        serve(metrics, settings, index=int(getattr(current_process(), "index", 0) or 0))

    def serve_without_children(sender: Any = None, **_: Any) -> None:
        from celery.concurrency.prefork import TaskPool

        pool_cls = getattr(getattr(sender, "controller", None), "pool_cls", None)
        if not (isinstance(pool_cls, type) and issubclass(pool_cls, TaskPool)):
            serve(metrics, settings)

    def count_retry(**_: Any) -> None:
        metrics.retries.labels(step="task").inc()

    def announce(sender: Any = None, instance: Any = None, **_: Any) -> None:
        # The banner's facts as one log record: JSON logs run without the banner (``swapfarm worker``).
        names = sorted(getattr(app.amqp.queues, "consume_from", None) or app.amqp.queues)
        logger.info(
            "worker %s: pool %s, concurrency %s, work dir %s; queues: %s",
            sender,
            getattr(getattr(instance, "pool_cls", None), "__module__", "?").rsplit(".", 1)[-1],
            getattr(instance, "concurrency", "?"),
            settings.work_dir.expanduser().resolve(),
            "; ".join(queue_lines(app, names)),
        )

    signals.setup_logging.connect(keep_logging, weak=False, dispatch_uid=f"{uid}-logging")
    signals.worker_process_init.connect(serve_in_child, weak=False, dispatch_uid=f"{uid}-metrics-child")
    signals.worker_ready.connect(serve_without_children, weak=False, dispatch_uid=f"{uid}-metrics-ready")
    signals.task_retry.connect(count_retry, weak=False, dispatch_uid=f"{uid}-retries")
    signals.celeryd_after_setup.connect(announce, weak=False, dispatch_uid=f"{uid}-announce")
