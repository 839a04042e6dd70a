"""Synthetic replicas of the rest of FaceFusion's swappers and enhancers: random weights, the real I/O.

Every swapper takes ``target`` [N, 3, S, S] and ``source`` — an identity vector [N, 512] or, for blendswap and
uniface, the source face as an image [N, 3, s, s] — and returns ``output`` [N, 3, S, S] in its value range
(hyperswap's also ``mask``). The body is a small encoder whose features are modulated by the source (AdaIN-like,
as every family here does in some form) and a decoder; the enhancers are the small restorer of
:mod:`tests.support.replicas` at their own size.
"""

from __future__ import annotations

import numpy as np
import onnx

from tests.support.replicas import Batch, _Graph, _image, _restorer, _vector, hyperswap_1a_256


def swapper(
    name: str,
    size: int,
    *,
    source_image: int | None = None,
    output_range: tuple[float, float] = (-1.0, 1.0),
    width: int = 4,
    seed: int = 0,
    batch: Batch = "N",
) -> onnx.ModelProto:
    """A swapper of side ``size`` whose source is a 512 vector, or an image of side ``source_image``."""
    g = _Graph(seed)
    if source_image is None:
        latent = "source"
        source = _vector("source", batch)
    else:
        features = g.node("Relu", [g.conv("source", 3, 16, 3, stride=2, pad=1)])
        pooled = g.node("Flatten", [g.node("GlobalAveragePool", [features])], axis=1)
        latent = g.node("Gemm", [pooled, g.param((512, 16), 0.25), g.param((512,), 0.01)], transB=1)
        source = _image("source", batch, source_image)
    h = g.leaky(g.conv("target", 3, width, 3, stride=2, pad=1), 0.2)
    h = g.leaky(g.conv(h, width, 2 * width, 3, stride=2, pad=1), 0.2)
    scale, shift = g.style(latent, 2 * width)
    h = g.node("Relu", [g.node("Add", [g.node("Mul", [g.instance_norm(h, 1e-8), scale]), shift])])
    h = g.leaky(g.conv(g.upsample(h), 2 * width, width, 3, pad=1), 0.2)
    h = g.node("Tanh", [g.conv(g.upsample(h), width, 3, 3, pad=1)])
    low, high = output_range
    if (low, high) == (0.0, 1.0):
        h = g.node(
            "Mul", [g.node("Add", [h, g.constant(np.array(1.0, np.float32))]), g.constant(np.array(0.5, np.float32))]
        )
    g.rename(h, "output")
    return g.model([_image("target", batch, size), source], [_image("output", batch, size)], name)


def ghost(seed: int = 0) -> onnx.ModelProto:
    return swapper("ghost_256", 256, seed=seed)


def blendswap_256(seed: int = 0) -> onnx.ModelProto:
    return swapper("blendswap_256", 256, source_image=112, output_range=(0.0, 1.0), seed=seed)


def uniface_256(seed: int = 0) -> onnx.ModelProto:
    return swapper("uniface_256", 256, source_image=256, seed=seed)


def hififace_unofficial_256(seed: int = 0) -> onnx.ModelProto:
    return swapper("hififace_unofficial_256", 256, seed=seed)


def simswap_unofficial_512(seed: int = 0) -> onnx.ModelProto:
    return swapper("simswap_unofficial_512", 512, output_range=(0.0, 1.0), seed=seed)


def hyperswap(seed: int = 0) -> onnx.ModelProto:
    return hyperswap_1a_256(seed=seed)


def enhancer(name: str, size: int, *, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """A restorer with the enhancers' I/O at side ``size``: ``input`` [N, 3, S, S] in [-1, 1] → ``output``."""
    g = _Graph(seed)
    g.rename(g.node("Add", ["input", _restorer(g, "input", width)]), "output")
    return g.model([_image("input", batch, size)], [_image("output", batch, size)], name)
