"""Replicas for the int8 guard: one that quantises well, one that cannot (an outlier channel).

Static int8 quantisation gives every activation tensor one scale (per tensor; weights get one per channel). A
model with one channel four orders of magnitude above the others — compensated by the next convolution's weights,
so its fp32 output is ordinary — loses the other channels to rounding when quantised: the guard must catch it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import onnx
from onnx import numpy_helper

from tests.support.replicas import _Graph, _image, _vector, realistic_emap
from tests.support.swapper_replicas import swapper

SIZE = 64
"""The replicas' crop side: small, so calibrating and compiling them is cheap."""
OUTLIER = 1e4
"""How much larger the outlier channel is than the others."""


def well_quantised(seed: int = 0) -> onnx.ModelProto:
    """A small swapper (encoder, source-modulated instance norm, decoder): ``target`` + ``source`` → ``output``."""
    return swapper("int8_friendly", SIZE, width=8, seed=seed)


def outlier_channel(seed: int = 0, size: int = SIZE) -> onnx.ModelProto:
    """The same I/O, with one feature channel scaled by :data:`OUTLIER` and the next convolution's weights on it
    scaled by its inverse (fp32 output unchanged in kind), modulated by ``source`` so both inputs are used."""
    g = _Graph(seed)
    width = 8
    h = g.leaky(g.conv("target", 3, width, 3, pad=1), 0.2)
    scale = np.ones((1, width, 1, 1), np.float32)
    scale[0, 0] = OUTLIER
    h = g.node("Mul", [h, g.constant(scale)])
    weight = g.rng.standard_normal((width, width, 3, 3), dtype=np.float32) * np.float32(np.sqrt(2.0 / (9 * width)))
    weight[:, 0] /= OUTLIER
    h = g.node("Conv", [h, g.constant(weight), g.param((width,), 0.01)], kernel_shape=[3, 3], pads=[1] * 4)
    gamma, beta = g.style("source", width)
    h = g.node("Add", [g.node("Mul", [h, gamma]), beta])
    h = g.node("Tanh", [g.conv(g.leaky(h, 0.2), width, 3, 3, pad=1)])
    g.rename(h, "output")
    return g.model([_image("target", "N", size), _vector("source", "N")], [_image("output", "N", size)], "outlier")


def as_inswapper(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (128² I/O) with inswapper's ``emap`` appended as its last initializer, so the face swapper takes it
    for ``inswapper_128`` (its latent is the identity projected by that matrix)."""
    model.graph.initializer.append(numpy_helper.from_array(realistic_emap(), "emap"))
    return model


def int8_inswapper(*, outlier: bool) -> onnx.ModelProto:
    """An ``inswapper_128`` stand-in that quantises well (``outlier=False``) or cannot (``True``)."""
    if outlier:
        return as_inswapper(outlier_channel(size=128))
    return as_inswapper(swapper("inswapper_128", 128, width=8, output_range=(0.0, 1.0)))


def crops(seed: int, count: int = 4) -> dict[str, npt.NDArray[np.float32]]:
    """Inputs for these replicas: smooth crops in [-1, 1] (noise at an eighth of the side, upsampled) and unit
    identity vectors."""
    rng = np.random.default_rng(seed)
    coarse = rng.uniform(-1, 1, (count, 3, SIZE // 8, SIZE // 8)).astype(np.float32)
    source = rng.standard_normal((count, 512)).astype(np.float32)
    return {
        "target": coarse.repeat(8, axis=2).repeat(8, axis=3),
        "source": source / np.linalg.norm(source, axis=1, keepdims=True),
    }
