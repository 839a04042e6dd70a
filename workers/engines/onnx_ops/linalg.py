"""Linear algebra and normalisation: Conv, ConvTranspose, Gemm, MatMul, the normalisations, reductions."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F  # noqa: N812  (torch's own spelling)

from workers.engines.onnx_ops.nodes import (
    Kernel,
    Node,
    Tensor,
    register,
)


def conv_padding(node: Node, spatial: int) -> tuple[list[int], list[int] | None]:
    """Symmetric padding per spatial axis, or zeros plus an explicit F.pad list where begin ≠ end."""
    auto_pad = node.attr("auto_pad", b"NOTSET").decode()
    if auto_pad not in {"NOTSET", "VALID"}:
        raise node.fail(f"auto_pad={auto_pad} is not supported")
    pads = [int(p) for p in node.attr("pads", [0] * 2 * spatial)]
    begin, end = pads[:spatial], pads[spatial:]
    if begin == end:
        return begin, None
    explicit = [p for axis in reversed(range(spatial)) for p in (begin[axis], end[axis])]
    return [0] * spatial, explicit


def _spatial_rank(node: Node, weight_index: int) -> int:
    shape = node.attr("kernel_shape")
    if shape is not None:
        return len(shape)
    return int(node.static(weight_index).ndim) - 2


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


@register("Conv")
def _conv(node: Node) -> Kernel:
    spatial = _spatial_rank(node, 1)
    if spatial not in _CONV:
        raise node.fail(f"{spatial}-D convolution is not supported")
    conv = _CONV[spatial]
    stride = [int(s) for s in node.attr("strides", [1] * spatial)]
    dilation = [int(d) for d in node.attr("dilations", [1] * spatial)]
    groups = int(node.attr("group", 1))
    padding, explicit = conv_padding(node, spatial)

    def run(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if explicit is not None:
            x = F.pad(x, explicit)
        low, out = _matmul_types(node, x, weight)
        result = conv(
            x.to(low), weight.to(low), None if bias is None else bias.to(low), stride, padding, dilation, groups
        )
        return result.to(out)

    return Kernel(run, (0, 1, 2))


@register("ConvTranspose")
def _conv_transpose(node: Node) -> Kernel:
    spatial = _spatial_rank(node, 1)
    if spatial != 2 or node.attr("output_shape") is not None:
        raise node.fail("only 2-D ConvTranspose without output_shape is supported")
    stride = [int(s) for s in node.attr("strides", [1, 1])]
    dilation = [int(d) for d in node.attr("dilations", [1, 1])]
    output_padding = [int(p) for p in node.attr("output_padding", [0, 0])]
    groups = int(node.attr("group", 1))
    padding, explicit = conv_padding(node, spatial)
    if explicit is not None:
        raise node.fail("asymmetric ConvTranspose padding is not supported")

    def run(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        low, out = _matmul_types(node, x, weight)
        low_bias = None if bias is None else bias.to(low)
        return F.conv_transpose2d(
            x.to(low), weight.to(low), low_bias, stride, padding, output_padding, groups, dilation
        ).to(out)

    return Kernel(run, (0, 1, 2))


@register("Gemm")
def _gemm(node: Node) -> Kernel:
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    trans_a, trans_b = bool(node.attr("transA", 0)), bool(node.attr("transB", 0))
    if alpha == 1.0 and beta == 1.0 and not trans_a and trans_b:

        def linear(a: Tensor, b: Tensor, c: Tensor | None) -> Tensor:  # the exported nn.Linear: one fused kernel
            low, out = _matmul_types(node, a, b)
            return F.linear(a.to(low), b.to(low), None if c is None else c.to(low)).to(out)

        return Kernel(linear, (0, 1, 2))

    def run(a: Tensor, b: Tensor, c: Tensor | None) -> Tensor:
        low, out = _matmul_types(node, a, b)
        a, b = a.to(low), b.to(low)
        product = ((a.t() if trans_a else a) @ (b.t() if trans_b else b)).to(out)
        product = product * alpha if alpha != 1.0 else product
        return product if c is None else product + (c * beta if beta != 1.0 else c)

    return Kernel(run, (0, 1, 2))


@register("MatMul")
def _matmul(node: Node) -> Kernel:
    def run(a: Tensor, b: Tensor) -> Tensor:
        low, out = _matmul_types(node, a, b)
        return torch.matmul(a.to(low), b.to(low)).to(out)

    return Kernel(run, (0, 1))


MATMUL_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
"""Operators that compute in ``matmul_dtype`` where one is set; their constant weights are stored in it."""


def _matmul_types(node: Node, x: Tensor, weight: Tensor) -> tuple[torch.dtype, torch.dtype]:
    """The dtype a matrix operator computes in — its weight's (stored in ``matmul_dtype`` or not by the converter)
    — and the one it hands back, its input's."""
    return (weight.dtype if weight.is_floating_point() else x.dtype), x.dtype


@register("BatchNormalization")
def _batch_norm(node: Node) -> Kernel:
    if int(node.attr("training_mode", 0)):
        raise node.fail("training-mode BatchNormalization is not supported")
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        return F.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)

    return Kernel(run, (0, 1, 2, 3, 4))


@register("InstanceNormalization")
def _instance_norm(node: Node) -> Kernel:
    eps = float(node.attr("epsilon", 1e-5))
    return Kernel(lambda x, scale, bias: F.instance_norm(x, weight=scale, bias=bias, eps=eps), (0, 1, 2))


@register("LayerNormalization")
def _layer_norm(node: Node) -> Kernel:
    if any(node.outputs[1:]):
        raise node.fail("LayerNormalization's mean and inverse-deviation outputs are not supported")
    axis, eps = int(node.attr("axis", -1)), float(node.attr("epsilon", 1e-5))

    def run(x: Tensor, scale: Tensor, bias: Tensor | None) -> Tensor:
        return F.layer_norm(x, tuple(x.shape[axis:]), scale, bias, eps)

    return Kernel(run, (0, 1, 2))


def _reduce(node: Node, reduce: Callable[[Tensor, tuple[int, ...], bool], Tensor], axes_input: bool) -> Kernel:
    axes = node.axes(1) if axes_input else ([int(a) for a in node.attr("axes", [])] or None)
    keep = bool(node.attr("keepdims", 1))
    if not axes and node.attr("noop_with_empty_axes", 0):
        return Kernel(lambda x: x, (0,))

    def run(x: Tensor) -> Tensor:
        return reduce(x, tuple(axes) if axes else tuple(range(x.dim())), keep)

    return Kernel(run, (0,))


_REDUCERS: Mapping[str, Callable[[Tensor, tuple[int, ...], bool], Tensor]] = {
    "ReduceMean": lambda x, dims, keep: torch.mean(x, dims, keep),
    "ReduceSum": lambda x, dims, keep: torch.sum(x, dims, keep),
    "ReduceMax": lambda x, dims, keep: torch.amax(x, dims, keep),
    "ReduceMin": lambda x, dims, keep: torch.amin(x, dims, keep),
    "ReduceL2": lambda x, dims, keep: torch.linalg.vector_norm(x, 2, dims, keep),
}


@register(*_REDUCERS)
def _reduction(node: Node) -> Kernel:
    # ReduceSum took its axes as an input from opset 13, the others from opset 18.
    axes_input = node.opset >= (13 if node.op == "ReduceSum" else 18)
    return _reduce(node, _REDUCERS[node.op], axes_input)


@register("ArgMax")
def _argmax(node: Node) -> Kernel:
    if node.attr("select_last_index", 0):
        raise node.fail("select_last_index is not supported")
    axis, keep = int(node.attr("axis", 0)), bool(node.attr("keepdims", 1))
    return Kernel(lambda x: torch.argmax(x, axis, keep), (0,))
