"""Synthetic replicas of LivePortrait's six files (docs/MODELS.md, LivePortrait): the registry's input and output
names, FaceFusion's shapes and layout, random weights, bodies as small as those shapes allow.

* ``feature_extractor``: ``input`` [N, 3, 256, 256] → ``feature_volume`` [N, 32, 16, 64, 64] (a 4× average pool and
  a 1×1 convolution to 512 channels, read as 32 × 16 depth).
* ``motion_extractor``: ``input`` → pitch, yaw, roll (degrees, [N]; 0-d where the batch is fixed to 1, as
  FaceFusion's code takes them), scale [N, 1], translation [N, 3], expression [N, 21, 3], motion_points [N, 21, 3]:
  heads of one linear layer over a pooled convolution, each in a plausible range (angles within ±20°, scale 1 ± 0.1,
  expression within ±0.02, the keypoints a fixed canonical set ± 0.02).
* ``generator``: ``feature_volume``, ``source``, ``target`` → ``output`` [N, 3, 512, 512] RGB in [0, 1]: the volume
  through a 1×1 convolution to 3 channels, plus ``motion`` times a linear map of the keypoints' move (source −
  target), through a sigmoid, upsampled 8×. With ``motion`` large, a small move of the keypoints shows.
* ``stitcher``: ``source``, ``target`` [N, 21, 3] → ``output`` = source + 0.01·tanh(linear(source, target)).
* ``eye_retargeter`` / ``lip_retargeter``: ``input`` [N, 66] / [N, 65] → ``output`` [N, 63] = ``scale``·tanh(linear).

:func:`install_portrait` writes them all (built once per test process) where ``resolve`` finds them;
:func:`portrait_models` adds the detector and the landmarker the processors load.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support import mask_replicas
from tests.support.data import DATA
from tests.support.replicas import Batch, _Graph, install_replica

KEYPOINTS = 21
PARTS = ("feature_extractor", "motion_extractor", "generator", "eye_retargeter", "lip_retargeter", "stitcher")


def _tensor(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _shape(g: _Graph, x: str, shape: list[int]) -> str:
    return g.node("Reshape", [x, g.constant(np.array(shape, np.int64))])


def _scaled_tanh(g: _Graph, x: str, scale: float, offset: float = 0.0) -> str:
    out = g.node("Mul", [g.node("Tanh", [x]), g.constant(np.array(scale, np.float32))])
    return g.node("Add", [out, g.constant(np.array(offset, np.float32))]) if offset else out


def _linear(g: _Graph, x: str, inputs: int, outputs: int, std: float) -> str:
    weight = g.param((outputs, inputs), std)
    bias = g.param((outputs,), 0.01)
    return g.node("Gemm", [x, weight, bias], transB=1)


def _slice(g: _Graph, x: str, start: int, stop: int, axis: int = 1) -> str:
    bounds = [g.constant(np.array([v], np.int64)) for v in (start, stop, axis, 1)]
    return g.node("Slice", [x, *bounds])


def feature_extractor(*, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """``input`` [N, 3, 256, 256] RGB in [0, 1] → ``feature_volume`` [N, 32, 16, 64, 64]."""
    g = _Graph(seed)
    pooled = g.node("AveragePool", ["input"], kernel_shape=[4, 4], strides=[4, 4])
    h = g.conv(pooled, 3, 512, 1)
    g.rename(_shape(g, h, [0, 32, 16, 64, 64]), "feature_volume")
    return g.model(
        [_tensor("input", [batch, 3, 256, 256])], [_tensor("feature_volume", [batch, 32, 16, 64, 64])], "features"
    )


def canonical_keypoints(seed: int = 0) -> np.ndarray:
    """A fixed canonical set of 21 3-D keypoints spread like a face's (x, y in ±0.6, z in ±0.1)."""
    rng = np.random.default_rng(seed + 1000)
    points = rng.uniform(-0.6, 0.6, (KEYPOINTS, 3)).astype(np.float32)
    points[:, 2] *= 0.15
    return points


def motion_extractor(*, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """``input`` [N, 3, 256, 256] → pitch, yaw, roll, scale, translation, expression, motion_points (see above)."""
    g = _Graph(seed)
    # zero-mean filters: they answer to the face's shapes, not to its mean colour, so faces and frames differ
    weights = g.rng.standard_normal((8, 3, 8, 8)).astype(np.float32)
    weights -= weights.mean(axis=(1, 2, 3), keepdims=True)
    h = g.node("Abs", [g.node("Conv", ["input", g.constant(weights)], kernel_shape=[8, 8], strides=[8, 8])])
    pooled = g.node("Flatten", [g.node("AveragePool", [h], kernel_shape=[8, 8], strides=[8, 8])], axis=1)
    centred = g.node("Sub", [pooled, g.node("ReduceMean", [pooled], axes=[1], keepdims=1)])
    spread = g.node("Sqrt", [g.node("ReduceMean", [g.node("Mul", [centred, centred])], axes=[1], keepdims=1)])
    features = g.node("Div", [centred, g.node("Add", [spread, g.constant(np.array(1e-6, np.float32))])])
    heads = _linear(g, features, 8 * 16, 7 + 2 * 3 * KEYPOINTS, 1.0 / np.sqrt(8 * 16))
    angle_shape = [] if batch == 1 else [-1]
    for index, name in enumerate(("pitch", "yaw", "roll")):
        g.rename(_shape(g, _scaled_tanh(g, _slice(g, heads, index, index + 1), 20.0), angle_shape), name)
    g.rename(_scaled_tanh(g, _slice(g, heads, 3, 4), 0.1, 1.0), "scale")
    g.rename(_scaled_tanh(g, _slice(g, heads, 4, 7), 0.05), "translation")
    expression = _scaled_tanh(g, _slice(g, heads, 7, 7 + 3 * KEYPOINTS), 0.02)
    g.rename(_shape(g, expression, [-1, KEYPOINTS, 3]), "expression")
    moved = _shape(g, _scaled_tanh(g, _slice(g, heads, 7 + 3 * KEYPOINTS, 7 + 6 * KEYPOINTS), 0.02), [-1, KEYPOINTS, 3])
    g.rename(g.node("Add", [moved, g.constant(canonical_keypoints(seed)[None])]), "motion_points")
    angle: list[int | str] = [] if batch == 1 else [batch]
    outputs = [_tensor(name, angle) for name in ("pitch", "yaw", "roll")]
    outputs += [_tensor("scale", [batch, 1]), _tensor("translation", [batch, 3])]
    outputs += [_tensor(name, [batch, KEYPOINTS, 3]) for name in ("expression", "motion_points")]
    return g.model([_tensor("input", [batch, 3, 256, 256])], outputs, "motion")


def generator(*, seed: int = 0, motion: float = 20.0, warp: bool = False, batch: Batch = "N") -> onnx.ModelProto:
    """``feature_volume`` [N, 32, 16, 64, 64], ``source``, ``target`` [N, 21, 3] → ``output`` [N, 3, 512, 512].

    ``warp``: the volume's image resampled through an identity grid by ``GridSample`` first (upstream's generator
    warps its volume by a sampled grid; the torch converter has no such operator)."""
    g = _Graph(seed)
    flat = _shape(g, "feature_volume", [0, 512, 64, 64])
    h = g.conv(flat, 512, 3, 1, gain=0.5)
    if warp:
        axis = (np.arange(64, dtype=np.float32) + 0.5) / 32 - 1  # pixel centres in [-1, 1]
        grid = np.stack(np.meshgrid(axis, axis), axis=-1)[None]  # [1, 64, 64, 2], (x, y)
        count = _slice(g, g.node("Shape", [h]), 0, 1, axis=0)
        shape = g.node("Concat", [count, g.constant(np.array([64, 64, 2], np.int64))], axis=0)
        h = g.node("GridSample", [h, g.node("Expand", [g.constant(grid), shape])], align_corners=0)
    move = g.node("Flatten", [g.node("Sub", ["source", "target"])], axis=1)
    shift = g.node("Mul", [_linear(g, move, 3 * KEYPOINTS, 3, 1.0), g.constant(np.array(motion, np.float32))])
    shift = g.node("Unsqueeze", [shift, g.constant(np.array([2, 3], np.int64))])
    image = g.node("Sigmoid", [g.node("Add", [h, shift])])
    scales = g.constant(np.array([1, 1, 8, 8], np.float32))
    g.rename(
        g.node("Resize", [image, "", scales], mode="linear", coordinate_transformation_mode="half_pixel"), "output"
    )
    keypoints = [_tensor(name, [batch, KEYPOINTS, 3]) for name in ("source", "target")]
    return g.model(
        [_tensor("feature_volume", [batch, 32, 16, 64, 64]), *keypoints],
        [_tensor("output", [batch, 3, 512, 512])],
        "generator",
    )


def stitcher(*, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """``source`` (edited), ``target`` (original) [N, 21, 3] → ``output`` [N, 21, 3], near ``source``."""
    g = _Graph(seed)
    both = g.node("Concat", [g.node("Flatten", ["source"], axis=1), g.node("Flatten", ["target"], axis=1)], axis=1)
    delta = _scaled_tanh(g, _linear(g, both, 6 * KEYPOINTS, 3 * KEYPOINTS, 1.0), 0.01)
    g.rename(g.node("Add", ["source", _shape(g, delta, [-1, KEYPOINTS, 3])]), "output")
    keypoints = [_tensor(name, [batch, KEYPOINTS, 3]) for name in ("source", "target")]
    return g.model(keypoints, [_tensor("output", [batch, KEYPOINTS, 3])], "stitcher")


def retargeter(inputs: int, *, scale: float = 0.02, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """``input`` [N, ``inputs``] (66: eyes, 65: lips) → ``output`` [N, 63], a keypoint move within ±``scale``."""
    g = _Graph(seed)
    g.rename(_scaled_tanh(g, _linear(g, "input", inputs, 3 * KEYPOINTS, 3.0), scale), "output")
    return g.model([_tensor("input", [batch, inputs])], [_tensor("output", [batch, 3 * KEYPOINTS])], "retargeter")


@cache
def replicas(batch: Batch = "N") -> dict[str, bytes]:
    """All six, serialised (built once per test process), by part."""
    built = {
        "feature_extractor": feature_extractor(batch=batch),
        "motion_extractor": motion_extractor(batch=batch),
        "generator": generator(batch=batch),
        "eye_retargeter": retargeter(66, batch=batch, seed=1),
        "lip_retargeter": retargeter(65, batch=batch, seed=2),
        "stitcher": stitcher(batch=batch),
    }
    return {part: model.SerializeToString() for part, model in built.items()}


def install_portrait(folder: Path, *, batch: Batch = "N", **models: onnx.ModelProto) -> None:
    """Write the six replicas into ``folder`` under the registry's file names; ``models`` replaces parts by name
    (``generator=generator(motion=0.0)``)."""
    for part, data in replicas(batch).items():
        model = models.get(part) or onnx.load_from_string(data)
        install_replica(model, f"live_portrait_{part}", folder)


def portrait_models(folder: Path) -> Path:
    """``folder`` with what the two processors load: the real YuNet detector, the fan_68_5 replica (the 68 points,
    exact) and the six LivePortrait replicas; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "yunet_2023_mar.onnx").write_bytes((DATA / "models" / "yunet_2023mar.onnx").read_bytes())
    install_replica(mask_replicas.fan_68_5(exact=True), "fan_68_5", folder)
    install_portrait(folder)
    return folder
