"""One OpenMP thread for the device path's pixel stages on the CPU.

The pixel work of a batch (a face's region blurred, crops warped, pasted back) is many small torch operations.
Each is split across torch's intra-op threads, and on a CPU that the pipeline's other stages (decoding, detection,
the model, encoding) keep busy, those threads wait on each other at every operation's barrier: measured on
``crowd_1080p`` (benchmarks/device_pipeline.py), face_blur's region work took 5 to 30 times as long on two threads
as on one. The pipeline already overlaps its stages on threads of their own, so each pixel stage runs on one.

``omp_set_num_threads`` sets the calling thread's own OpenMP thread count; ``torch.set_num_threads`` would also
change the default of every thread started later (the model's among them).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from functools import cache, wraps

import torch

from workers.processors.base import Stage, Work

__all__ = ["calling_thread_on_one", "one_thread"]

logger = logging.getLogger(__name__)


@cache
def _omp_set_num_threads() -> Callable[[int], None] | None:
    try:
        return ctypes.CDLL(None).omp_set_num_threads
    except (AttributeError, OSError):  # torch without OpenMP: nothing to set
        logger.info("no OpenMP runtime in the process: the device path's pixel stages use torch's threads")
        return None


def calling_thread_on_one() -> None:
    """Set the calling thread's own OpenMP thread count to one (where the process has an OpenMP runtime)."""
    setter = _omp_set_num_threads()
    if setter is not None:
        torch.get_num_threads()  # torch's lazy per-thread initialisation first, or it would undo the setting
        setter(1)


def one_thread(stage: Stage) -> Stage:
    """``stage``, run on one OpenMP thread in whichever thread calls it (the setting is that thread's own)."""

    @wraps(stage)
    def run(work: Work) -> Work:
        calling_thread_on_one()
        return stage(work)

    return run
