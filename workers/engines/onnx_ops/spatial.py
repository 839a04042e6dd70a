"""Spatial operators: Pad, Resize, the poolings, DepthToSpace."""

from __future__ import annotations

import numpy as np
import torch.nn.functional as F  # noqa: N812  (torch's own spelling)

from workers.engines.onnx_ops.linalg import conv_padding
from workers.engines.onnx_ops.nodes import (
    Kernel,
    Node,
    Tensor,
    register,
)

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


@register("Pad")
def _pad(node: Node) -> Kernel:
    mode = node.attr("mode", b"constant").decode()
    if mode not in _PAD_MODES:
        raise node.fail(f"pad mode {mode} is not supported")
    pads = [int(p) for p in node.attr("pads")] if node.opset < 11 else node.ints(1)
    value = float(node.attr("value", 0.0)) if node.opset < 11 else (node.scalar(2) if node.has(2) else 0.0)
    rank = len(pads) // 2
    axes = node.axes(3) if node.opset >= 18 else None
    begin, end = [0] * rank, [0] * rank
    for position, axis in enumerate(axes if axes is not None else range(rank)):
        begin[axis], end[axis] = pads[position], pads[position + len(pads) // 2]
    torch_pads = [p for axis in reversed(range(rank)) for p in (begin[axis], end[axis])]
    while torch_pads[-2:] == [0, 0] and len(torch_pads) > 2:  # F.pad's reflect/replicate pad inner axes only
        torch_pads = torch_pads[:-2]
    torch_mode = _PAD_MODES[mode]
    if torch_mode == "constant":
        return Kernel(lambda x: F.pad(x, torch_pads, "constant", value), (0,))
    return Kernel(lambda x: F.pad(x, torch_pads, torch_mode), (0,))


_INTERPOLATION = {1: "linear", 2: "bilinear", 3: "trilinear"}


@register("Resize")
def _resize(node: Node) -> Kernel:
    mode = node.attr("mode", b"nearest").decode()
    transform = node.attr("coordinate_transformation_mode", b"half_pixel").decode()
    nearest = node.attr("nearest_mode", b"round_prefer_floor").decode()
    if node.attr("antialias", 0):
        raise node.fail("antialias is not supported")
    if mode == "linear" and transform in {"half_pixel", "pytorch_half_pixel", "align_corners"}:
        align = transform == "align_corners"
        torch_mode = ""
    elif mode == "nearest" and (transform, nearest) == ("asymmetric", "floor"):
        align, torch_mode = False, "nearest"
    elif mode == "nearest" and (transform, nearest) == ("half_pixel", "round_prefer_ceil"):
        align, torch_mode = False, "nearest-exact"
    elif (
        mode == "cubic"
        and transform in {"half_pixel", "pytorch_half_pixel", "align_corners"}
        and (float(node.attr("cubic_coeff_a", -0.75)) == -0.75 and not node.attr("exclude_outside", 0))
    ):  # torch's bicubic: Keys' kernel with a = -0.75, borders clamped (what both exporters write for it)
        align, torch_mode = transform == "align_corners", "bicubic"
    else:
        raise node.fail(f"mode={mode} with {transform}/{nearest} is not supported")
    scales = node.static(2).astype(np.float64).reshape(-1) if node.has(2) and node.static(2).size else None
    sizes = node.shape(3) if scales is None else None
    if scales is not None and (len(scales) < 3 or any(scales[:2] != 1.0)):
        raise node.fail(f"only spatial scales are supported, got {list(scales)}")
    spatial = len(scales) - 2 if scales is not None else len(sizes or []) - 2
    torch_mode = torch_mode or _INTERPOLATION.get(spatial, "")
    if torch_mode == "bicubic" and spatial != 2:
        raise node.fail("cubic Resize of other than two spatial axes is not supported")
    if not torch_mode or sizes is not None and not all(isinstance(s, int) for s in sizes[2:]):
        raise node.fail("Resize of this rank or with run-time sizes is not supported")
    size = [int(s) for s in sizes[2:]] if sizes is not None else None  # type: ignore[arg-type]  # ints, checked
    factors = [float(s) for s in scales[2:]] if scales is not None else None
    corners = align if torch_mode not in {"nearest", "nearest-exact"} else None

    def run(x: Tensor) -> Tensor:
        return F.interpolate(x, size=size, scale_factor=factors, mode=torch_mode, align_corners=corners)

    return Kernel(run, (0,))


def _pool_args(node: Node) -> tuple[list[int], list[int], list[int], list[int] | None, bool]:
    kernel = [int(k) for k in node.attr("kernel_shape")]
    stride = [int(s) for s in node.attr("strides", [1] * len(kernel))]
    padding, explicit = conv_padding(node, len(kernel))
    if len(kernel) != 2:
        raise node.fail("only 2-D pooling is supported")
    return kernel, stride, padding, explicit, bool(node.attr("ceil_mode", 0))


@register("MaxPool")
def _max_pool(node: Node) -> Kernel:
    if any(node.outputs[1:]):
        raise node.fail("MaxPool's indices output is not supported")
    kernel, stride, padding, explicit, ceil = _pool_args(node)
    dilation = [int(d) for d in node.attr("dilations", [1, 1])]

    def run(x: Tensor) -> Tensor:
        if explicit is not None:
            x = F.pad(x, explicit, value=float("-inf"))
        return F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil)

    return Kernel(run, (0,))


@register("AveragePool")
def _average_pool(node: Node) -> Kernel:
    kernel, stride, padding, explicit, ceil = _pool_args(node)
    if explicit is not None:
        raise node.fail("asymmetric AveragePool padding is not supported")
    include = bool(node.attr("count_include_pad", 0))
    return Kernel(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil, include), (0,))


@register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node: Node) -> Kernel:
    if node.op == "GlobalAveragePool":
        return Kernel(lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True), (0,))
    return Kernel(lambda x: x.amax(tuple(range(2, x.dim())), keepdim=True), (0,))


@register("DepthToSpace")
def _depth_to_space(node: Node) -> Kernel:
    block, mode = int(node.attr("blocksize")), node.attr("mode", b"DCR").decode()
    if mode == "CRD":
        return Kernel(lambda x: F.pixel_shuffle(x, block), (0,))

    def dcr(x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        x = x.reshape(n, block, block, c // (block * block), h, w).permute(0, 3, 4, 1, 5, 2)
        return x.reshape(n, c // (block * block), h * block, w * block)

    return Kernel(dcr, (0,))
