"""How a detector covers a frame larger than its input: the scale the frame is seen at, and either one run over the
whole scaled picture (a network that takes any size) or overlapping tiles of the input's size, detected two at a
time, whose faces cut by a tile's inner edge are left to the tile that holds them whole."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]

__all__ = [
    "AT_ONCE_MOST",
    "TILE_OVERLAP",
    "SCANS_AT_ONCE",
    "TILE_THREADS",
    "TileGrid",
    "fitted_tiles",
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


@dataclass(frozen=True)
class TileGrid:
    """Tiles of ``width``×``height`` px at ``origins`` (top-left corners, row by row)."""

    width: int
    height: int
    origins: list[tuple[int, int]]


def fitted_tiles(width: int, height: int, tile: int) -> TileGrid:
    """Tiles covering a ``width``×``height`` picture for a network that takes any size: as many as
    :func:`tile_origins` (``tile``-sided), each cut no larger than it takes for neighbours to overlap by as much
    (:data:`TILE_OVERLAP` of ``tile``), spaced evenly, sides a multiple of 32. A 1080p frame turned 30° and seen at
    two thirds of its size (1469×1264 px) takes nine 640-px tiles, or nine of 608×544 px in 80 % of their time."""
    overlap = int(tile * TILE_OVERLAP)

    def axis(extent: int) -> tuple[int, list[int]]:
        count = len(_positions(extent, tile))
        if count == 1:
            return min(tile, -(-extent // 32) * 32), [0]
        least = -(-(extent + (count - 1) * overlap) // count)  # count tiles this long overlap by ``overlap``
        side = min(tile, -(-least // 32) * 32)
        return side, [round(i * (extent - side) / (count - 1)) for i in range(count)]

    tile_w, xs = axis(width)
    tile_h, ys = axis(height)
    return TileGrid(tile_w, tile_h, [(x, y) for y in ys for x in xs])


def inside_tile(
    boxes: FloatArray, x0: int, y0: int, tile: int | tuple[int, int], width: int, height: int
) -> npt.NDArray[np.bool_]:
    """Which boxes (tile coordinates) do not touch an edge of the tile (``tile`` px square, or (width, height)) that
    is not an edge of the picture."""
    tile_w, tile_h = (tile, tile) if isinstance(tile, int) else tile
    keep = np.ones(len(boxes), dtype=bool)
    if x0 > 0:
        keep &= boxes[:, 0] > _EDGE
    if y0 > 0:
        keep &= boxes[:, 1] > _EDGE
    if x0 + tile_w < width:
        keep &= boxes[:, 2] < tile_w - _EDGE
    if y0 + tile_h < height:
        keep &= boxes[:, 3] < tile_h - _EDGE
    return keep
