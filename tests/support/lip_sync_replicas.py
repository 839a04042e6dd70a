"""Synthetic replicas of the lip-sync and voice-extraction models: the registry's I/O (docs/MODELS.md §10.6–10.7),
deterministic bodies whose effect a test can see.

* ``wav2lip_96`` / ``wav2lip_gan_96`` — ``source`` [N, 1, 80, 16] (mel window), ``target`` [N, 6, 96, 96] (masked
  crop, crop; BGR / 255) → ``output`` [N, 3, 96, 96] BGR in [0, 1]: the crop (channels 3–5) tinted towards a colour
  by ``sigmoid(mean(source))``, so a louder window tints more and a silent one (−4) barely.
* ``edtalk_256`` — ``source`` [N, 1, 80, 16], ``target`` [N, 3, 256, 256] RGB, ``weight`` [1] → ``output`` [N, 3,
  256, 256]: the same tint, scaled by the weight.
* MDX-Net voice extractors — ``input`` [W, 4, 3072, T] → ``output`` of the same layout: the bins below ``keep``
  (6.25 Hz each) kept, the rest zeroed: a low-pass, so a test can tell the voice path ran.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph, _image

TINT_BGR = (0.1, 0.2, 0.9)  # a red mouth


def _tint(g: _Graph, face: str, source: str, scale: str | None = None) -> str:
    loud = g.node("Sigmoid", [g.node("ReduceMean", [source], axes=[1, 2, 3], keepdims=1)])  # [N, 1, 1, 1]
    if scale is not None:
        loud = g.node("Mul", [loud, scale])
    colour = g.constant(np.array(TINT_BGR, np.float32).reshape(1, 3, 1, 1))
    keep = g.node("Sub", [g.constant(np.array(1.0, np.float32)), loud])
    return g.node("Add", [g.node("Mul", [face, keep]), g.node("Mul", [colour, loud])])


def _mel(batch: Batch) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("source", TensorProto.FLOAT, [batch, 1, 80, 16])


def wav2lip(*, batch: Batch = "N", name: str = "wav2lip_gan_96") -> onnx.ModelProto:
    g = _Graph(0)
    starts, ends, axes = (g.constant(np.array([v], np.int64)) for v in (3, 6, 1))
    face = g.node("Slice", ["target", starts, ends, axes])
    g.rename(_tint(g, face, "source"), "output")
    return g.model([_mel(batch), _image("target", batch, 96, 6)], [_image("output", batch, 96)], name)


def edtalk(*, batch: Batch = "N") -> onnx.ModelProto:
    g = _Graph(0)
    rgb = _tint(g, "target", "source", "weight")
    g.rename(rgb, "output")
    weight = helper.make_tensor_value_info("weight", TensorProto.FLOAT, [1])
    return g.model([_mel(batch), _image("target", batch, 256), weight], [_image("output", batch, 256)], "edtalk_256")


def mdx_voice(*, frames: int = 32, keep: int = 160, name: str = "kim_vocal_2") -> onnx.ModelProto:
    """A voice extractor whose windows have ``frames`` STFT frames (the real kim_vocal_2 has 256)."""
    g = _Graph(0)
    mask = np.zeros((1, 1, 3072, 1), np.float32)
    mask[:, :, :keep] = 1.0
    g.rename(g.node("Mul", ["input", g.constant(mask)]), "output")
    shape = ["W", 4, 3072, frames]
    tensor = helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)
    return g.model([tensor], [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], name)
