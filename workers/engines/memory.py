"""How much memory a batch may use: the device's free memory, the peak a batch reached, and what out-of-memory
looks like — behind one small interface (:class:`DeviceMemory`), so a test can stand in a small simulated GPU.

A worker's batch size is fitted to the memory it has (:func:`fitted_batch`): ``free × safety ÷ per-item peak``,
with the per-item peak measured while the engine warms up. On CUDA/ROCm the device is torch's
(:class:`TorchDeviceMemory`); on the CPU a RAM budget plays the same role (:class:`HostMemory`).

Nothing here imports torch at module level: the Celery prefork parent imports this module and must not touch CUDA.
"""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

logger = logging.getLogger(__name__)

_OOM_MESSAGES = (
    "out of memory",  # torch CUDA/ROCm, ONNX Runtime's CUDA provider
    "failed to allocate memory",  # ONNX Runtime's arena
    "can't allocate memory",  # torch's CPU allocator
    "hiperroroutofmemory",
)


class DeviceMemory(Protocol):
    """The memory of the device a model runs on."""

    @property
    def device(self) -> str:
        """Where the memory is, in words (``cuda:0``, ``cpu``)."""
        ...

    def free_bytes(self) -> int:
        """Bytes a batch may still take now."""
        ...

    def used_bytes(self) -> int:
        """Bytes in use now (the baseline of a peak measurement)."""
        ...

    def reset_peak(self) -> None:
        """Start a new peak measurement."""
        ...

    def peak_bytes(self) -> int:
        """The most bytes in use since :meth:`reset_peak`."""
        ...

    def release(self) -> None:
        """Give cached, unused memory back (after an out-of-memory)."""
        ...

    def is_out_of_memory(self, error: BaseException) -> bool:
        """Whether ``error`` says the device ran out of memory (and a smaller batch may fit)."""
        ...


def _message_says_oom(error: BaseException) -> bool:
    text = str(error).lower()
    return any(message in text for message in _OOM_MESSAGES)


def fitted_batch(free_bytes: int, per_item_bytes: int, safety: float, limit: int) -> int:
    """The largest power of two ≤ ``limit`` whose items fit in ``free_bytes × safety``; at least 1.

    Example::

        fitted_batch(free_bytes=10 * 2**30, per_item_bytes=600 * 2**20, safety=0.8, limit=64)  # → 8 (13.6 fit)
    """
    if per_item_bytes <= 0:
        fits = limit
    else:
        fits = min(limit, int(free_bytes * safety) // per_item_bytes)
    if fits < 1:
        return 1
    return 1 << (fits.bit_length() - 1)


class HostMemory:
    """RAM as the device: free is the system's available memory, capped by ``budget_bytes`` (what this process
    may hold in all) if given. Peaks are the process's high-water mark (``/proc/self/status`` ``VmHWM``, reset
    through ``/proc/self/clear_refs``); where ``/proc`` is missing, peaks read 0 and nothing is fitted."""

    def __init__(self, budget_bytes: int | None = None, proc: Path = Path("/proc")) -> None:
        self._budget = budget_bytes
        self._proc = proc

    @property
    def device(self) -> str:
        return "cpu"

    def _status(self, key: str) -> int:
        try:
            for line in (self._proc / "self" / "status").read_text().splitlines():
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _available(self) -> int:
        try:
            for line in (self._proc / "meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")

    def free_bytes(self) -> int:
        available = self._available()
        if self._budget is None:
            return available
        return max(0, min(available, self._budget - self.used_bytes()))

    def used_bytes(self) -> int:
        return self._status("VmRSS")

    def reset_peak(self) -> None:
        try:
            (self._proc / "self" / "clear_refs").write_text("5")
        except OSError:
            logger.debug("cannot reset the process's peak memory; peaks include earlier ones")

    def peak_bytes(self) -> int:
        return self._status("VmHWM")

    def release(self) -> None:
        gc.collect()

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, MemoryError) or _message_says_oom(error)


class TorchDeviceMemory:
    """A CUDA or ROCm device's memory, as torch's caching allocator sees it."""

    def __init__(self, index: int = 0) -> None:
        import torch

        self._torch: Any = torch
        self._index = index

    @property
    def device(self) -> str:
        return f"cuda:{self._index}"

    def free_bytes(self) -> int:
        cuda = self._torch.cuda
        free, _total = cuda.mem_get_info(self._index)
        # Memory torch holds in its cache but no tensor uses is free for the next batch too.
        cached = cuda.memory_reserved(self._index) - cuda.memory_allocated(self._index)
        return int(free + cached)

    def used_bytes(self) -> int:
        return int(self._torch.cuda.memory_allocated(self._index))

    def reset_peak(self) -> None:
        self._torch.cuda.reset_peak_memory_stats(self._index)

    def peak_bytes(self) -> int:
        return int(self._torch.cuda.max_memory_allocated(self._index))

    def release(self) -> None:
        gc.collect()
        self._torch.cuda.empty_cache()

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, self._torch.cuda.OutOfMemoryError) or _message_says_oom(error)


def memory_for(
    device: str, ram_budget_bytes: int | None = None, *, probe: Literal["device", "host"] = "device"
) -> DeviceMemory:
    """The memory of torch ``device`` (``cuda``, ``cuda:1``, ``cpu`` …): the GPU's where ``probe`` is ``device``
    (a family's :attr:`shared.families.FamilySpec.memory`) and ``device`` is a CUDA device, else the host's RAM."""
    if probe == "device" and device.startswith("cuda"):
        _, _, index = device.partition(":")
        return TorchDeviceMemory(int(index or 0))
    return HostMemory(ram_budget_bytes)


def per_item_bytes(peaks: Mapping[int, int]) -> int:
    """The memory one more item costs, from the peaks ``{batch: bytes}`` of calls of several batch sizes: the slope
    between the smallest and largest measured buckets, or the one bucket's peak divided by its size (an
    overestimate: it counts what the call costs at any size too)."""
    sizes = sorted(peaks)
    if len(sizes) == 1:
        return peaks[sizes[0]] // sizes[0]
    low, high = sizes[0], sizes[-1]
    slope = (peaks[high] - peaks[low]) // (high - low)
    return slope if slope > 0 else peaks[high] // high
