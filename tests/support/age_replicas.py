"""Synthetic replicas of the age models: the registry's I/O (docs/MODELS.md 10.1), bodies whose effect a test can
see, built once per test session (``functools.cache``: treat what they return as read-only).

* ``fran`` — ``target`` [N, 3, 1024, 1024] RGB in [0, 1] and ``direction`` f32 [2] → ``output`` of the target's
  layout: the target, plus ``(direction[1] − direction[0]) · SHIFT`` per channel (older: redder, less blue), plus
  ``residual`` · a small convolutional branch (conv, LeakyReLU, conv, Tanh), clipped to [0, 1].
* ``styleganex_age`` — ``target`` [N, 3, 256, 256] and ``target_with_background`` [N, 3, 384, 384], RGB in
  [-1, 1], and ``direction`` f32 0-d → ``output`` [N, 3, 384, 384]: the crop with background, plus
  ``direction`` · fine stripes (a 4 px period, "wrinkles" that the colour match keeps), plus ``residual`` · the same
  branch, plus a trace of the face's mean colour (so the face input counts); clipped to [-1, 1].
"""

from __future__ import annotations

from functools import cache

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph, _image

SHIFT_RGB = (1.0, 0.0, -1.0)  # fran: per unit of (direction[1] − direction[0]), added to R, G, B
STRIPES = 0.08  # styleganex: the stripes' amplitude per unit of direction


def _branch(g: _Graph, x: str, residual: float, width: int) -> str:
    h = g.leaky(g.conv(x, 3, width, 3, pad=1), 0.2)
    h = g.node("Tanh", [g.conv(h, width, 3, 3, pad=1)])
    return g.node("Mul", [h, g.constant(np.array(residual, np.float32))])


def _clip(g: _Graph, x: str, low: float, high: float) -> str:
    return g.node("Clip", [x, g.constant(np.array(low, np.float32)), g.constant(np.array(high, np.float32))])


@cache
def fran(*, residual: float = 0.0, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """fran with the real inputs and layout; ``residual=0``: the target shifted by its direction alone."""
    g = _Graph(seed)
    starts, ends, axes = (g.constant(np.array([v], np.int64)) for v in (0, 1, 0))
    now = g.node("Slice", ["direction", starts, ends, axes])
    wanted = g.node("Slice", ["direction", ends, g.constant(np.array([2], np.int64)), axes])
    years = g.node("Reshape", [g.node("Sub", [wanted, now]), g.constant(np.array([1, 1, 1, 1], np.int64))])
    shift = g.node("Mul", [years, g.constant(np.array(SHIFT_RGB, np.float32).reshape(1, 3, 1, 1))])
    moved = g.node("Add", [g.node("Add", ["target", shift]), _branch(g, "target", residual, width)])
    g.rename(_clip(g, moved, 0.0, 1.0), "output")
    direction = helper.make_tensor_value_info("direction", TensorProto.FLOAT, [2])
    return g.model([_image("target", batch, 1024), direction], [_image("output", batch, 1024)], "fran")


@cache
def styleganex_age(*, residual: float = 0.0, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """styleganex_age with the real inputs and layout; its output at 384 (the real side is not known)."""
    g = _Graph(seed)
    rows = (np.arange(384) % 4 < 2).astype(np.float32) * 2 - 1  # +1, +1, -1, -1 …: a 4 px period
    stripes = g.constant((np.tile(rows[:, None], (1, 384)) * STRIPES).reshape(1, 1, 384, 384))
    lined = g.node("Mul", [g.node("Reshape", ["direction", g.constant(np.array([1, 1, 1, 1], np.int64))]), stripes])
    face = g.node("Mul", [g.node("GlobalAveragePool", ["target"]), g.constant(np.array(0.01, np.float32))])
    body = g.node("Add", [g.node("Add", ["target_with_background", lined]), face])
    body = g.node("Add", [body, _branch(g, "target_with_background", residual, width)])
    g.rename(_clip(g, body, -1.0, 1.0), "output")
    direction = helper.make_tensor_value_info("direction", TensorProto.FLOAT, [])
    inputs = [_image("target", batch, 256), _image("target_with_background", batch, 384), direction]
    return g.model(inputs, [_image("output", batch, 384)], "styleganex_age")
