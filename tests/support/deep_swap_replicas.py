"""Synthetic replicas of DeepFaceLive models (``.dfm``): the layout of DeepFaceLab's export (docs/MODELS.md 10.3),
a body whose effect a test can see, built once per test session (``functools.cache``: treat as read-only).

``in_face:0`` [N, S, S, 3] BGR in [0, 1] (and ``morph_value:0`` f32 [1] where ``morph``) → ``out_face_mask:0``
[N, S, S, 1], ``out_celeb_face:0`` [N, S, S, 3], ``out_celeb_face_mask:0`` [N, S, S, 1], NHWC as tf2onnx writes them
(a Transpose in, convolutions in NCHW, a Transpose out). Inside an ellipse over the face (:func:`face_ellipse`) the
face becomes ``TINT_BGR`` with fine stripes (a 4 px period, which a colour match keeps), by ``morph / 100`` where the
model takes a morph value (fully where it does not); outside it the face is the input. Both masks are the ellipse
(the model's own a little wider), so the paste-back mask is known. ``residual`` adds a small convolutional branch.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph

TINT_BGR = (0.75, 0.25, 0.2)  # blue
STRIPES = 0.15


def face_ellipse(side: int, widen: float = 1.0) -> npt.NDArray[np.float32]:
    """1 inside the ellipse over a dfl_whole_face crop's face (centre 0.49, 0.55; radii 0.2, 0.26 of the side)."""
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    inside = ((x - 0.49) / (0.2 * widen)) ** 2 + ((y - 0.55) / (0.26 * widen)) ** 2 <= 1.0
    return inside.astype(np.float32)


def _nhwc(name: str, batch: Batch, side: int, channels: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, side, side, channels])


@cache
def dfm(
    *, side: int = 224, morph: bool = True, residual: float = 0.0, width: int = 4, seed: int = 0, batch: Batch = "N"
) -> onnx.ModelProto:
    """A DeepFaceLive model of ``side`` px with the real input and output names, order and layout."""
    g = _Graph(seed)
    x = g.node("Transpose", ["in_face:0"], perm=[0, 3, 1, 2])
    zero, one = (g.constant(np.array(value, np.float32)) for value in (0.0, 1.0))
    ones = g.node("Add", [g.node("Mul", [g.node("ReduceMean", [x], axes=[1], keepdims=1), zero]), one])  # [N, 1, S, S]
    ellipse = g.constant(face_ellipse(side).reshape(1, 1, side, side))
    strength = (
        g.node("Reshape", ["morph_value:0", g.constant(np.array([1, 1, 1, 1], np.int64))])
        if morph
        else g.constant(np.array(1.0, np.float32).reshape(1, 1, 1, 1))
    )
    weight = g.node("Mul", [ellipse, strength])  # [1, 1, S, S]
    columns = (np.arange(side) % 4 < 2).astype(np.float32) * 2 - 1
    made = np.array(TINT_BGR, np.float32).reshape(1, 3, 1, 1) + STRIPES * columns.reshape(1, 1, 1, side)
    keep = g.node("Mul", [x, g.node("Sub", [one, weight])])
    face = g.node("Add", [keep, g.node("Mul", [g.constant(made.astype(np.float32)), weight])])
    branch = g.node("Tanh", [g.conv(g.leaky(g.conv(x, 3, width, 3, pad=1), 0.2), width, 3, 3, pad=1)])
    face = g.node("Add", [face, g.node("Mul", [branch, g.constant(np.array(residual, np.float32))])])
    face = g.node("Clip", [face, zero, one])
    wider = g.constant(face_ellipse(side, 1.1).reshape(1, 1, side, side))
    outputs = {
        "out_face_mask:0": g.node("Mul", [ones, ellipse]),
        "out_celeb_face:0": face,
        "out_celeb_face_mask:0": g.node("Mul", [ones, wider]),
    }
    for name, value in outputs.items():
        g.rename(g.node("Transpose", [value], perm=[0, 2, 3, 1]), name)
    inputs = [_nhwc("in_face:0", batch, side, 3)]
    if morph:
        inputs.append(helper.make_tensor_value_info("morph_value:0", TensorProto.FLOAT, [1]))
    channels = {"out_face_mask:0": 1, "out_celeb_face:0": 3, "out_celeb_face_mask:0": 1}
    return g.model(inputs, [_nhwc(name, batch, side, count) for name, count in channels.items()], "dfm")
