"""Synthetic replicas of the frame colourisers: the registry's I/O (``input`` [N, 3, H, W] RGB, any H x W, the
job's ``frame_colorizer.size``), a body whose output can be checked.

* DDColor (``ddcolor``): ``output`` [N, 2, H, W] Lab a, b = ``tint`` + ``residual`` · a small convolutional branch
  (conv, LeakyReLU, conv, Tanh, times 40) of the input; with ``residual=0`` every pixel's a, b is ``tint``.
* DeOldify (``deoldify``): ``output`` [N, 3, H, W] RGB 0–255 = the input (raw 0–255) + ``tint`` + ``residual`` · the
  same branch times 40.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph


def _io(name: str, batch: Batch, channels: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, channels, "height", "width"])


def _branch(g: _Graph, x: str, cout: int, residual: float, width: int) -> str:
    h = g.leaky(g.conv(x, 3, width, 3, pad=1), 0.2)
    h = g.node("Tanh", [g.conv(h, width, cout, 3, pad=1)])
    return g.node("Mul", [h, g.constant(np.array(40.0 * residual, np.float32))])


def ddcolor(
    *,
    tint: tuple[float, float] = (30.0, -20.0),
    residual: float = 0.0,
    width: int = 4,
    seed: int = 0,
    batch: Batch = "N",
) -> onnx.ModelProto:
    """A DDColor colouriser with the real I/O names and layout: [N, 3, H, W] RGB in [0, 1] → [N, 2, H, W] a, b."""
    g = _Graph(seed)
    base = g.constant(np.array(tint, np.float32).reshape(1, 2, 1, 1))
    g.rename(g.node("Add", [_branch(g, "input", 2, residual, width), base]), "output")
    return g.model([_io("input", batch, 3)], [_io("output", batch, 2)], "ddcolor")


def deoldify(
    *,
    tint: tuple[float, float, float] = (40.0, 0.0, -30.0),
    residual: float = 0.0,
    width: int = 4,
    seed: int = 0,
    batch: Batch = "N",
) -> onnx.ModelProto:
    """A DeOldify colouriser with the real I/O names and layout: [N, 3, H, W] RGB 0–255 → [N, 3, H, W] RGB 0–255."""
    g = _Graph(seed)
    shifted = g.node("Add", ["input", g.constant(np.array(tint, np.float32).reshape(1, 3, 1, 1))])
    g.rename(g.node("Add", [shifted, _branch(g, "input", 3, residual, width)]), "output")
    return g.model([_io("input", batch, 3)], [_io("output", batch, 3)], "deoldify")
