"""Pixel boost: a swapper sees a crop larger than its input as k² phase-interleaved tiles of its own size.

A ``B``×``B`` crop with ``B = k·S`` is split so that tile ``(i, j)`` holds the pixels ``crop[i::k, j::k]`` — every
tile is the whole face at the model's resolution, shifted by a fraction of a pixel — each tile is swapped (all
tiles of all faces in one batch), and the results are interleaved back: FaceFusion's ``implode_pixel_boost`` and
``explode_pixel_boost``. Splitting and reassembling are exact inverses, so the boost changes nothing but what the
model sees.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Crops = npt.NDArray[np.uint8]


def boost_factor(boost_size: int, model_size: int) -> int:
    """How many tiles a side of a ``boost_size`` crop splits into for a ``model_size`` swapper.

    Raises:
        ValueError: ``boost_size`` is not a positive multiple of ``model_size``.
    """
    if boost_size < model_size or boost_size % model_size:
        raise ValueError(f"pixel boost {boost_size} is not a multiple of the swapper's size {model_size}")
    return boost_size // model_size


def implode(crops: Crops, factor: int) -> Crops:
    """``[M, k·S, k·S, 3]`` crops → ``[M·k², S, S, 3]`` tiles, face by face, tile ``(i, j)`` = ``crop[i::k, j::k]``."""
    count, side = len(crops), crops.shape[1]
    size = side // factor
    tiles = crops.reshape(count, size, factor, size, factor, 3).transpose(0, 2, 4, 1, 3, 5)
    return np.ascontiguousarray(tiles.reshape(count * factor * factor, size, size, 3))


def explode(tiles: Crops, factor: int) -> Crops:
    """The inverse of :func:`implode`: ``[M·k², S, S, 3]`` tiles → ``[M, k·S, k·S, 3]`` crops."""
    size = tiles.shape[1]
    count = len(tiles) // (factor * factor)
    crops = tiles.reshape(count, factor, factor, size, size, 3).transpose(0, 3, 1, 4, 2, 5)
    return np.ascontiguousarray(crops.reshape(count, size * factor, size * factor, 3))
