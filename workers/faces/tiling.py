"""How a detector covers a frame larger than its input: the scale the frame is seen at, and either one run over the
whole scaled picture (a network that takes any size) or overlapping tiles of the input's size, detected two at a
time, whose faces cut by a tile's inner edge are left to the tile that holds them whole."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]

__all__ = [
    "AT_ONCE_MOST",
    "SCANS_AT_ONCE",
    "TILE_OVERLAP",
    "TILE_THREADS",
    "inside_tile",
    "scan_pool",
    "seen_at",
    "tile_origins",
    "tile_pool",
]


def seen_at(height: int, width: int, view: int) -> tuple[float, tuple[int, int]]:
    """The scale a ``height``×``width`` frame is seen at by a detector of size ``view`` (it fits a ``view``-sided
    square, never enlarged), and the ``(width, height)`` of the frame so scaled."""
    scale = min(view / height, view / width, 1.0)
    return scale, (max(1, round(width * scale)), max(1, round(height * scale)))


TILE_THREADS = 2
"""A frame's tiles are detected this many at a time: ONNX Runtime's own threads leave a core idle between a small
model's layers, and the next tile's input is made meanwhile (docs/performance.md)."""

SCANS_AT_ONCE = 2
"""Frames an anonymiser's sweep scans at once (``DetectionSweep.scan_soon``), each detecting its tiles
:data:`TILE_THREADS` at a time: on 2 cores one frame's passes alone left 0.6 of a core idle, between model runs."""

_TILE_POOL = ThreadPoolExecutor(TILE_THREADS, thread_name_prefix="tiles")
_SCAN_POOL = ThreadPoolExecutor(SCANS_AT_ONCE, thread_name_prefix="scans")


def tile_pool() -> ThreadPoolExecutor:
    """The pool a frame's tiles are detected on (this process's own)."""
    return _TILE_POOL


def scan_pool() -> ThreadPoolExecutor:
    """The pool an anonymiser's sweep scans frames ahead on (this process's own; its threads use :func:`tile_pool`)."""
    return _SCAN_POOL


def _new_pools() -> None:
    """A forked child gets pools of its own: the parent's threads are not in them, and a pool that believes it has
    them would never run what it is given."""
    global _TILE_POOL, _SCAN_POOL
    _TILE_POOL = ThreadPoolExecutor(TILE_THREADS, thread_name_prefix="tiles")
    _SCAN_POOL = ThreadPoolExecutor(SCANS_AT_ONCE, thread_name_prefix="scans")


os.register_at_fork(after_in_child=_new_pools)

AT_ONCE_MOST = 4096 * 4096
"""The largest picture (pixels) a detector that takes any size runs at once; a larger one is tiled. A 5120×2880
picture (a 4K frame enlarged for 24-px faces) took 293 ms in one run, its 66 tiles 376 ms (2026-12-06)."""

TILE_OVERLAP = 0.25
"""Tiles overlap by this fraction of a tile, so a face up to that size lies whole in one of them."""

_EDGE = 2.0  # px: a box this close to a tile's inner edge is cut by it


def _positions(extent: int, tile: int) -> list[int]:
    if extent <= tile:
        return [0]
    step = max(1, int(tile * (1 - TILE_OVERLAP)))
    starts = list(range(0, extent - tile, step))
    return [*starts, extent - tile]


def tile_origins(width: int, height: int, tile: int) -> list[tuple[int, int]]:
    """The top-left corners of the tiles covering a ``width``×``height`` picture, row by row."""
    return [(x, y) for y in _positions(height, tile) for x in _positions(width, tile)]


def inside_tile(boxes: FloatArray, x0: int, y0: int, tile: int, width: int, height: int) -> npt.NDArray[np.bool_]:
    """Which boxes (tile coordinates) do not touch an edge of the tile that is not an edge of the picture."""
    keep = np.ones(len(boxes), dtype=bool)
    if x0 > 0:
        keep &= boxes[:, 0] > _EDGE
    if y0 > 0:
        keep &= boxes[:, 1] > _EDGE
    if x0 + tile < width:
        keep &= boxes[:, 2] < tile - _EDGE
    if y0 + tile < height:
        keep &= boxes[:, 3] < tile - _EDGE
    return keep
