"""A worker's Prometheus series, kept in a registry of their own, and the HTTP server that exposes them.

Each pool process of a worker renders on its own and serves its own series: the n-th process of a prefork pool
listens on ``worker_metrics_port + n`` (one process, the default for GPU workers, listens on the port itself).
The server starts in the process that runs tasks, never in the prefork parent, so every number it reports is
that process's own. Farm-wide series (jobs by state, queue depth) come from the API's ``/metrics``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.families import FAMILIES
from shared.settings import Settings
from workers.degradations import DegradationCollector

__all__ = ["DeviceMemoryCollector", "WorkerMetrics", "serve"]

logger = logging.getLogger(__name__)

_SECONDS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)
_BATCHES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)
RETRY_STEPS = ("render", "task")


class WorkerMetrics:
    """The series one worker process records.

    ``swapfarm_chunk_render_seconds``, ``swapfarm_frames_rendered_total`` and
    ``swapfarm_worker_frames_per_second`` per chunk; ``swapfarm_render_batch_size`` per batch;
    ``swapfarm_retries_total`` per failed attempt sent again; ``swapfarm_stitch_seconds`` per stitch;
    ``swapfarm_device_memory_bytes`` read at scrape time; ``swapfarm_degradations_total{code}``
    (:mod:`workers.degradations`: fallbacks such as ``engine_fallback``, ``eager_fallback``); the standard ``process_*``
    series.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.chunk_seconds = Histogram(
            "swapfarm_chunk_render_seconds",
            "Wall time of a chunk render, from claim to upload",
            ["family"],
            buckets=_SECONDS,
            registry=registry,
        )
        self.frames = Counter("swapfarm_frames_rendered", "Frames rendered and uploaded", ["family"], registry=registry)
        self.frames_per_second = Gauge(
            "swapfarm_worker_frames_per_second",
            "Frames per second of the last chunk this worker process rendered (decode, processors, encode, upload)",
            ["worker", "family"],
            registry=registry,
        )
        self.batch_size = Histogram(
            "swapfarm_render_batch_size", "Frames per batch through the processors", buckets=_BATCHES, registry=registry
        )
        self.retries = Counter(
            "swapfarm_retries",
            "Failed attempts sent again: render = a chunk attempt below the attempt limit, task = a Celery autoretry",
            ["step"],
            registry=registry,
        )
        for step in RETRY_STEPS:
            self.retries.labels(step=step)
        self.stitch_seconds = Histogram(
            "swapfarm_stitch_seconds",
            "Wall time of a stitch, from its lease to the published output",
            buckets=_SECONDS,
            registry=registry,
        )
        self.worker_blocklists = Counter(
            "swapfarm_worker_blocklists",
            "Jobs this worker was blocklisted for (blocklist_after chunk failures of one job; shared.worker_health)",
            registry=registry,
        )
        self.worker_quarantines = Counter(
            "swapfarm_worker_quarantines",
            "Times this worker was quarantined (chunk failures on several jobs within the window)",
            registry=registry,
        )
        registry.register(DeviceMemoryCollector())
        registry.register(DegradationCollector())
        ProcessCollector(registry=registry)

    def chunk_rendered(self, *, worker: str, family: str, frames: int, seconds: float) -> None:
        self.chunk_seconds.labels(family=family).observe(seconds)
        self.frames.labels(family=family).inc(frames)
        if seconds > 0:
            self.frames_per_second.labels(worker=worker, family=family).set(frames / seconds)


class DeviceMemoryCollector(Collector):
    """``swapfarm_device_memory_bytes``, read at scrape time.

    ``device="cuda:N"`` (or ``rocm:N``): memory in use on the GPU this process works on, by every process and
    runtime on it (ONNX Runtime's arena included), as the driver reports it. Only read once torch has opened the
    device in this process, so a scrape never creates a GPU context. ``device="cpu"``: this process's resident
    memory (Linux).
    """

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "swapfarm_device_memory_bytes",
            "Memory in use per device (GPU: whole device; cpu: this process)",
            labels=["device"],
        )
        for device, used in _device_memory():
            family.add_metric([device], float(used))
        yield family


def _device_memory() -> Iterator[tuple[str, int]]:
    torch = sys.modules.get("torch")  # never imported here: only a process that already uses torch is asked
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        index = int(torch.cuda.current_device())
        free, total = torch.cuda.mem_get_info(index)
        build = "hip" if getattr(torch.version, "hip", None) else "cuda"
        kind = next(spec.name for spec in FAMILIES.values() if spec.torch_build == build)  # cuda, rocm
        yield f"{kind}:{index}", int(total) - int(free)
    statm = Path("/proc/self/statm")
    if statm.exists():
        resident_pages = int(statm.read_text().split()[1])
        yield "cpu", resident_pages * os.sysconf("SC_PAGE_SIZE")


def serve(metrics: WorkerMetrics, settings: Settings, index: int = 0) -> int | None:
    """Serve ``metrics`` over HTTP on ``settings.worker_metrics_port + index``; the port, or ``None`` when off.

    A port already taken is logged and skipped: metrics never stop a worker from rendering.
    """
    if settings.worker_metrics_port is None:
        return None
    port = settings.worker_metrics_port + index
    try:
        start_http_server(port, addr=settings.worker_metrics_address, registry=metrics.registry)
    except OSError as exc:
        logger.warning(
            "metrics: cannot listen on %s:%d (%s); this process serves no metrics",
            settings.worker_metrics_address,
            port,
            exc,
        )
        return None
    logger.info("metrics: serving on %s:%d/metrics", settings.worker_metrics_address, port)
    return port
