"""Synthetic replicas of the landmark and mask models: random weights (or fixed answers), the real I/O.

* ``xseg`` — ``input`` NHWC [N, 256, 256, 3] → ``output`` [N, 256, 256, 1] in 0…1;
* ``bisenet`` — ``input`` [N, 3, 512, 512] → ``output`` [N, 19, 512, 512] class scores;
* ``fan_2dfan4`` — ``input`` [N, 3, 256, 256] → ``landmarks`` [N, 68, 3] (64² heatmap units) and ``heatmaps``
  [N, 68, 64, 64];
* ``fan_68_5`` — ``input`` [N, 5, 2] → ``output`` [N, 68, 2].

``region_parser`` and ``constant_occluder`` answer the same regardless of the image, so a test knows exactly which
pixels of an aligned crop they mark.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph, _image

PARSER_CLASSES = 19
BACKGROUND = 0


def _tensor(name: str, shape: Sequence[Batch]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def xseg(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """xseg_1/2/3, reduced: NHWC BGR in 0…1 → a sigmoid mask [N, 256, 256, 1]."""
    g = _Graph(seed)
    h = g.node("Transpose", ["input"], perm=[0, 3, 1, 2])
    h = g.leaky(g.conv(h, 3, width, 3, stride=2, pad=1), 0.1)
    h = g.leaky(g.conv(h, width, 2 * width, 3, stride=2, pad=1), 0.1)
    h = g.leaky(g.conv(g.upsample(h), 2 * width, width, 3, pad=1), 0.1)
    h = g.node("Sigmoid", [g.conv(g.upsample(h), width, 1, 3, pad=1)])
    g.rename(g.node("Transpose", [h], perm=[0, 2, 3, 1]), "output")
    return g.model([_tensor("input", [batch, 256, 256, 3])], [_tensor("output", [batch, 256, 256, 1])], "xseg")


def _upscale(g: _Graph, x: str, factor: int, mode: str = "linear") -> str:
    scales = g.constant(np.array([1, 1, factor, factor], np.float32))
    return g.node("Resize", [x, "", scales], mode=mode, coordinate_transformation_mode="half_pixel")


def bisenet(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """bisenet_resnet_18/34, reduced: RGB ImageNet-normalised [N, 3, 512, 512] → 19 class scores at 512²
    (features at 1/8, upsampled ×8 bilinearly, as BiSeNet's output head does)."""
    g = _Graph(seed)
    h = g.node("Relu", [g.conv("input", 3, width, 3, stride=2, pad=1)])
    h = g.node("Relu", [g.conv(h, width, 2 * width, 3, stride=2, pad=1)])
    h = g.node("Relu", [g.conv(h, 2 * width, 2 * width, 3, stride=2, pad=1)])
    h = g.conv(h, 2 * width, PARSER_CLASSES, 1)
    g.rename(_upscale(g, h, 8), "output")
    return g.model([_image("input", batch, 512)], [_image("output", batch, 512, channels=PARSER_CLASSES)], "bisenet")


def region_parser(label: int, box: tuple[float, float, float, float], *, batch: Batch = "N") -> onnx.ModelProto:
    """A parser with bisenet's I/O that calls the pixels of ``box`` (x1, y1, x2, y2 as fractions of the crop)
    class ``label`` and every other pixel background, whatever the image."""
    g = _Graph(0)
    grid = 64
    logits = np.zeros((1, PARSER_CLASSES, grid, grid), np.float32)
    logits[0, BACKGROUND] = 1.0
    x1, y1, x2, y2 = (round(value * grid) for value in box)
    logits[0, BACKGROUND, y1:y2, x1:x2] = 0.0
    logits[0, label, y1:y2, x1:x2] = 1.0
    zero = g.node(
        "Mul", [g.node("ReduceMean", ["input"], axes=[1, 2, 3], keepdims=1), g.constant(np.array(0.0, np.float32))]
    )
    h = g.node("Add", [zero, g.constant(logits)])
    g.rename(_upscale(g, h, 512 // grid, mode="nearest"), "output")
    return g.model(
        [_image("input", batch, 512)], [_image("output", batch, 512, channels=PARSER_CLASSES)], "region_parser"
    )


def constant_occluder(box: tuple[float, float, float, float], *, batch: Batch = "N") -> onnx.ModelProto:
    """An occluder with xseg's I/O that says the face shows only inside ``box`` (fractions of the crop)."""
    g = _Graph(0)
    grid = 64
    visible = np.zeros((1, grid, grid, 1), np.float32)
    x1, y1, x2, y2 = (round(value * grid) for value in box)
    visible[0, y1:y2, x1:x2, 0] = 1.0
    zero = g.node(
        "Mul", [g.node("ReduceMean", ["input"], axes=[1, 2, 3], keepdims=1), g.constant(np.array(0.0, np.float32))]
    )
    h = g.node("Transpose", [g.node("Add", [zero, g.constant(visible)])], perm=[0, 3, 1, 2])
    h = g.node("Transpose", [_upscale(g, h, 256 // grid, mode="nearest")], perm=[0, 2, 3, 1])
    g.rename(h, "output")
    return g.model(
        [_tensor("input", [batch, 256, 256, 3])], [_tensor("output", [batch, 256, 256, 1])], "constant_occluder"
    )


def fan_2dfan4(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """2dfan4, reduced: 68 sigmoid heatmaps at 64² and the points as their soft-argmax (x, y, 1) in heatmap
    units."""
    g = _Graph(seed)
    h = g.node("Relu", [g.conv("input", 3, width, 3, stride=2, pad=1)])
    h = g.node("Relu", [g.conv(h, width, 2 * width, 3, stride=2, pad=1)])
    logits = g.conv(h, 2 * width, 68, 3, pad=1, gain=4.0)
    heatmaps = g.node("Sigmoid", [logits])
    flat = g.node("Reshape", [logits, g.constant(np.array([0, 68, 64 * 64], np.int64))])
    weights = g.node("Softmax", [flat], axis=-1)
    ys, xs = np.mgrid[0:64, 0:64].astype(np.float32)
    grid = np.stack([xs.ravel() + 0.5, ys.ravel() + 0.5, np.ones(64 * 64, np.float32)], axis=1)
    g.rename(g.node("MatMul", [weights, g.constant(grid)]), "landmarks")
    g.rename(heatmaps, "heatmaps")
    return g.model(
        [_image("input", batch, 256)],
        [_tensor("landmarks", [batch, 68, 3]), _tensor("heatmaps", [batch, 68, 64, 64])],
        "2dfan4",
    )


def mean_shape_68() -> npt.NDArray[np.float32]:
    """A rough 68-point face in ffhq_512 unit coordinates (jaw, brows, nose, eyes, mouth in iBUG order)."""
    t = np.linspace(0.0, 1.0, 17)
    jaw = np.stack([0.25 + 0.5 * t, 0.5 + 0.3 * np.sin(np.pi * t)], axis=1)
    brows = np.stack([np.r_[np.linspace(0.3, 0.45, 5), np.linspace(0.55, 0.7, 5)], np.full(10, 0.4)], axis=1)
    nose = np.stack(
        [np.r_[np.full(4, 0.5), np.linspace(0.45, 0.55, 5)], np.r_[np.linspace(0.47, 0.58, 4), np.full(5, 0.62)]],
        axis=1,
    )
    angles = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    eyes = np.concatenate(
        [np.stack([cx + 0.04 * np.cos(angles), 0.47 + 0.015 * np.sin(angles)], axis=1) for cx in (0.377, 0.623)]
    )
    outer = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    inner = np.linspace(0, 2 * np.pi, 8, endpoint=False)
    mouth = np.concatenate(
        [
            np.stack([0.5 - 0.11 * np.cos(outer), 0.725 + 0.04 * np.sin(outer)], axis=1),
            np.stack([0.5 - 0.07 * np.cos(inner), 0.725 + 0.015 * np.sin(inner)], axis=1),
        ]
    )
    shape = np.concatenate([jaw, brows, nose, eyes, mouth]).astype(np.float32)
    assert shape.shape == (68, 2)
    return shape


def fan_68_5(*, width: int = 32, seed: int = 0, batch: Batch = "N", exact: bool = False) -> onnx.ModelProto:
    """fan_68_5, reduced: [N, 5, 2] → [N, 68, 2] in the same unit coordinates: :func:`mean_shape_68` plus a
    small learned offset of the input (none at all with ``exact``, so a test knows every point)."""
    g = _Graph(seed)
    flat = g.node("Flatten", ["input"], axis=1)
    h = g.node("Relu", [g.node("Gemm", [flat, g.param((width, 10), 0.3), g.param((width,), 0.01)], transB=1)])
    offset = g.node("Gemm", [h, g.param((136, width), 0.0 if exact else 0.01), g.param((136,), 0.0)], transB=1)
    points = g.node("Add", [offset, g.constant(mean_shape_68().reshape(1, 136))])
    g.rename(g.node("Reshape", [points, g.constant(np.array([-1, 68, 2], np.int64))]), "output")
    return g.model([_tensor("input", [batch, 5, 2])], [_tensor("output", [batch, 68, 2])], "fan_68_5")


FAIRFACE_CLASSES = (7, 2, 9)  # race, gender, age bracket


def fairface(
    *, width: int = 8, seed: int = 0, batch: Batch = "N", answer: tuple[int, int, int] | None = None
) -> onnx.ModelProto:
    """FairFace, reduced: ``input`` [N, 3, 224, 224] → ``race_id``, ``gender_id``, ``age_id`` int64 [N] (the
    argmax of each head's logits). With ``answer`` (race, gender, age bracket) every face gets those ids."""
    g = _Graph(seed)
    h = g.node("Relu", [g.conv("input", 3, width, 3, stride=4, pad=1)])
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [g.conv(h, width, 2 * width, 3, stride=2, pad=1)])], axis=1)
    total = sum(FAIRFACE_CLASSES)
    logits = g.node("Gemm", [pooled, g.param((total, 2 * width), 1.0), g.param((total,), 0.1)], transB=1)
    if answer is not None:
        fixed = np.full((1, total), -10.0, np.float32)
        offsets = np.cumsum((0, *FAIRFACE_CLASSES[:-1]))
        for offset, choice in zip(offsets, answer, strict=True):
            fixed[0, offset + choice] = 10.0
        logits = g.node("Add", [g.node("Mul", [logits, g.constant(np.array(0.0, np.float32))]), g.constant(fixed)])
    start = 0
    for name, count in zip(("race_id", "gender_id", "age_id"), FAIRFACE_CLASSES, strict=True):
        head = g.node(
            "Slice",
            [
                logits,
                g.constant(np.array([start], np.int64)),
                g.constant(np.array([start + count], np.int64)),
                g.constant(np.array([1], np.int64)),
            ],
        )
        g.rename(g.node("ArgMax", [head], axis=1, keepdims=0), name)
        start += count
    outputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [batch]) for n in ("race_id", "gender_id", "age_id")]
    return g.model([_image("input", batch, 224)], outputs, "fairface")


NSFW_SIZES = {"nsfw_1": 640, "nsfw_2": 384, "nsfw_3": 448}


def nsfw(name: str, flags: bool, *, batch: Batch = "N") -> onnx.ModelProto:
    """An NSFW analyser with the real input and output layout that flags every frame (``flags``) or none:
    nsfw_1 a YOLO output [N, 6, 100] (class scores 0.9 or 0), nsfw_2 probabilities [N, 2] (0.9 or 0 nsfw),
    nsfw_3 logits [N, 2] (a margin of 20 or 0)."""
    g = _Graph(0)
    size = NSFW_SIZES[name]
    if name == "nsfw_1":
        answer = np.zeros((1, 6, 100), np.float32)
        answer[0, 4:, :] = 0.9 if flags else 0.0
        shape: list[Batch] = [batch, 6, 100]
    else:
        answer = np.array([[0.1, 0.9]] if flags else [[1.0, 0.0]], np.float32)
        if name == "nsfw_3":
            answer = np.array([[0.0, 20.0]] if flags else [[0.0, 0.0]], np.float32)
        shape = [batch, 2]
    axes = [3] if name == "nsfw_1" else [2, 3]
    mean = g.node("ReduceMean", ["input"], axes=[1, 2, 3], keepdims=1)
    zero = g.node(
        "Mul", [g.node("Squeeze", [mean, g.constant(np.array(axes, np.int64))]), g.constant(np.array(0.0, np.float32))]
    )
    g.rename(g.node("Add", [zero, g.constant(answer)]), "output")
    return g.model([_image("input", batch, size)], [_tensor("output", shape)], name)
