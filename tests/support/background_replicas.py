"""Synthetic replicas of the background removers: the registry's I/O (``input`` [N, 3, S, S] at the model's side,
``output`` [N, 1, S, S]; corridor_key's four input channels and two outputs; u2net_cloth's class scores), and a
matte that can be checked.

The matte is a shape baked in at the model's side (:func:`ellipse`, 1 inside and 0 outside, in the frame's
coordinates whatever its size: the model sees the whole frame resized) plus ``residual`` times a small
encoder-decoder of the input (stride-2 convolutions down to 1/8, a convolution, bilinear upsampling back, Tanh:
MODNet's low-resolution semantic branch, reduced), clipped to [0, 1]. With ``residual=0`` the matte is the shape
exactly, so a test knows which pixels are foreground; with ``residual=1`` it depends on every input pixel, for
parity and batching tests.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph
from workers.models.registry import REGISTRY

CENTRE = (0.5, 0.62)  # x, y of d18's person (head and shoulders) in the frame, as fractions of its side
RADII = (0.38, 0.52)


def ellipse(
    size: int, centre: tuple[float, float] = CENTRE, radii: tuple[float, float] = RADII
) -> npt.NDArray[np.bool_]:
    """Where the replica's matte is 1 on its ``size`` x ``size`` input: an ellipse (pixel centres)."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    return ((xs / size - centre[0]) / radii[0]) ** 2 + ((ys / size - centre[1]) / radii[1]) ** 2 <= 1


def _io(name: str, batch: Batch, channels: int, size: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, channels, size, size])


def _branch(g: _Graph, x: str, cin: int, cout: int, residual: float, width: int) -> str:
    """``residual`` x Tanh of a reduced encoder-decoder of ``x``: ``[N, cout, S, S]``."""
    h = x
    channels = cin
    for _ in range(3):  # down to 1/8
        h = g.node("Relu", [g.conv(h, channels, width, 3, stride=2, pad=1)])
        channels = width
    h = g.conv(h, width, cout, 3, pad=1)
    for _ in range(3):
        h = g.upsample(h)
    h = g.node("Tanh", [h])
    return g.node("Mul", [h, g.constant(np.array(residual, np.float32))])


def _matte(g: _Graph, x: str, cin: int, size: int, residual: float, width: int) -> str:
    shape = g.constant(ellipse(size).astype(np.float32)[None, None])
    summed = g.node("Add", [shape, _branch(g, x, cin, 1, residual, width)])
    return g.node("Clip", [summed, g.constant(np.array(0.0, np.float32)), g.constant(np.array(1.0, np.float32))])


def matting(
    name: str = "modnet", *, residual: float = 0.0, width: int = 4, seed: int = 0, batch: Batch = "N"
) -> onnx.ModelProto:
    """A matting model ``name`` (modnet, isnet_general, rmbg_1.4 …) at its registry side: ``input`` [N, 3, S, S]
    → ``output`` [N, 1, S, S] in [0, 1]."""
    size = _side(name)
    g = _Graph(seed)
    g.rename(_matte(g, "input", 3, size, residual, width), "output")
    return g.model([_io("input", batch, 3, size)], [_io("output", batch, 1, size)], name)


def clothes(
    *, classes: int = 4, residual: float = 0.0, width: int = 4, seed: int = 0, batch: Batch = "N"
) -> onnx.ModelProto:
    """u2net_cloth: ``input`` [N, 3, 768, 768] → ``output`` [N, C, 768, 768] class scores; class 1 wins inside
    the shape, the background's class 0 outside it."""
    size = _side("u2net_cloth")
    g = _Graph(seed)
    matte = _matte(g, "input", 3, size, residual, width)
    background = g.node("Sub", [g.constant(np.array(1.0, np.float32)), matte])
    rest = g.node("Mul", [matte, g.constant(np.zeros((1, classes - 2, 1, 1), np.float32))])
    g.rename(g.node("Concat", [background, matte, rest], axis=1), "output")
    return g.model([_io("input", batch, 3, size)], [_io("output", batch, classes, size)], "u2net_cloth")


def keyer(
    name: str = "corridor_key_1024",
    *,
    foreground: tuple[float, float, float] = (0.2, 0.6, 0.4),
    residual: float = 0.0,
    width: int = 4,
    seed: int = 0,
    batch: Batch = "N",
) -> onnx.ModelProto:
    """corridor_key: ``input`` [N, 4, S, S] (RGB and the green-screen hint) → ``alpha`` [N, 1, S, S] and
    ``foreground`` [N, 3, S, S], RGB in [0, 1]: ``foreground`` everywhere (plus the branch)."""
    size = _side(name)
    g = _Graph(seed)
    g.rename(_matte(g, "input", 4, size, residual, width), "alpha")
    colour = g.constant(np.array(foreground, np.float32).reshape(1, 3, 1, 1))
    g.rename(g.node("Add", [colour, _branch(g, "input", 4, 3, residual / 10, width)]), "foreground")
    outputs = [_io("alpha", batch, 1, size), _io("foreground", batch, 3, size)]
    return g.model([_io("input", batch, 4, size)], outputs, name)


def _side(name: str) -> int:
    side = REGISTRY[name].input_size
    assert side is not None
    return side
