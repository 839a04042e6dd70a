"""Element-wise operators: unary and binary maths, comparisons, activations, Clip, Softmax, Cast."""

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

_UNARY: Mapping[str, Callable[[Tensor], Tensor]] = {
    "Relu": torch.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Erf": torch.erf,
    "Sqrt": torch.sqrt,
    "Exp": torch.exp,
    "Log": torch.log,
    "Neg": torch.neg,
    "Abs": torch.abs,
    "Reciprocal": torch.reciprocal,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Not": torch.logical_not,
    "Identity": lambda x: x,
}


@register(*_UNARY)
def _unary(node: Node) -> Kernel:
    return Kernel(_UNARY[node.op], (0,))


def _divide(a: Tensor, b: Tensor) -> Tensor:
    if a.is_floating_point() or b.is_floating_point():
        return a / b
    return torch.div(a, b, rounding_mode="trunc")  # ONNX integer division truncates


_BINARY: Mapping[str, Callable[[Tensor, Tensor], Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": _divide,
    "Pow": torch.pow,
    "Equal": torch.eq,
    "Less": torch.lt,
    "LessOrEqual": torch.le,
    "Greater": torch.gt,
    "GreaterOrEqual": torch.ge,
    "And": torch.logical_and,
    "Or": torch.logical_or,
}


@register(*_BINARY)
def _binary(node: Node) -> Kernel:
    return Kernel(_BINARY[node.op], (0, 1))


@register("Min", "Max")
def _min_max(node: Node) -> Kernel:
    pick = torch.minimum if node.op == "Min" else torch.maximum

    def run(*xs: Tensor) -> Tensor:
        result = xs[0]
        for x in xs[1:]:
            result = pick(result, x)
        return result

    return Kernel(run, tuple(range(len(node.values))))


@register("Where")
def _where(node: Node) -> Kernel:
    return Kernel(torch.where, (0, 1, 2))


@register("LeakyRelu")
def _leaky_relu(node: Node) -> Kernel:
    slope = float(node.attr("alpha", 0.01))
    return Kernel(lambda x: F.leaky_relu(x, slope), (0,))


@register("PRelu")
def _prelu(node: Node) -> Kernel:
    # ONNX broadcasts the slope (often [C, 1, 1]); F.prelu wants it 1-D.
    return Kernel(lambda x, slope: torch.where(x < 0, x * slope, x), (0, 1))


@register("Clip")
def _clip(node: Node) -> Kernel:
    if node.opset < 11:
        low, high = node.attr("min"), node.attr("max")
    else:
        low = node.scalar(1) if node.has(1) else None
        high = node.scalar(2) if node.has(2) else None
    if low is None and high is None:
        return Kernel(lambda x: x, (0,))
    return Kernel(lambda x: torch.clamp(x, low, high), (0,))


@register("Gelu")
def _gelu(node: Node) -> Kernel:
    approximate = str(node.attr("approximate", b"none").decode())
    return Kernel(lambda x: F.gelu(x, approximate=approximate), (0,))


@register("Softmax")
def _softmax(node: Node) -> Kernel:
    if node.opset < 13:
        raise node.fail("Softmax before opset 13 (2-D coercion) is not supported")
    axis = int(node.attr("axis", -1))
    return Kernel(lambda x: torch.softmax(x, axis), (0,))


@register("Cast")
def _cast(node: Node) -> Kernel:
    dtype = node.dtype(int(node.attr("to")))
    return Kernel(lambda x: x.to(dtype), (0,))
