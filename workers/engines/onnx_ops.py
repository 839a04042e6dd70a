"""The ONNX operators the torch converter (:mod:`workers.engines.onnx_to_torch`) supports: one small function per
operator, registered in :data:`OPS`.

Each function reads one ONNX node (:class:`Node`: its attributes and what is known of its inputs when the model is
converted) and returns a :class:`Kernel`: a torch function of the inputs that are only known at run time. What an
operator needs as plain Python values (a Reshape's shape, a Pad's pads, a Resize's scales …) is read from the
node when converting, so the traced graph holds no tensor-to-list round trips and ``torch.compile`` traces it
whole (``fullgraph=True``, no graph breaks). An input that must be known then and is not raises
:class:`~shared.errors.ModelError` naming the node.

A shape may depend on the batch size: :class:`DimRef` stands for "axis ``a`` of graph input ``x``", read from the
input tensor at run time (a plain int under ``torch.compile`` with static shapes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F  # noqa: N812  (torch's own spelling)
from onnx import TensorProto

from shared.errors import ModelError

Tensor = torch.Tensor
KernelFn = Callable[..., Tensor | tuple[Tensor, ...]]

INT64_MAX = 2**63 - 1

TORCH_DTYPES: Mapping[int, torch.dtype] = {
    TensorProto.FLOAT: torch.float32,
    TensorProto.FLOAT16: torch.float16,
    TensorProto.BFLOAT16: torch.bfloat16,
    TensorProto.DOUBLE: torch.float64,
    TensorProto.INT64: torch.int64,
    TensorProto.INT32: torch.int32,
    TensorProto.INT16: torch.int16,
    TensorProto.INT8: torch.int8,
    TensorProto.UINT8: torch.uint8,
    TensorProto.BOOL: torch.bool,
}
"""ONNX element types torch can hold, by ONNX type number."""


@dataclass(frozen=True)
class DimRef:
    """A dimension known only at run time: axis ``axis`` of graph input ``value`` (the batch size, mostly)."""

    value: str
    axis: int


ShapeElement = int | DimRef


@dataclass(frozen=True)
class Static:
    """A value known when converting (an initializer, a Constant, or computed from them)."""

    array: npt.NDArray[Any]


@dataclass(frozen=True)
class ShapeVec:
    """A 1-D int64 shape value (or one element of it, ``scalar``) with some run-time elements."""

    elements: tuple[ShapeElement, ...]
    scalar: bool = False


@dataclass(frozen=True)
class Live:
    """A value computed at run time; ``dims`` is its shape as far as shape inference knows it (``None``: unknown
    rank; an element ``None``: unknown size)."""

    dims: tuple[ShapeElement | None, ...] | None = None


Value = Static | ShapeVec | Live


@dataclass(frozen=True)
class Kernel:
    """What a node runs: ``fn(*inputs, *refs)`` with the node's input positions ``inputs`` (``None`` for an absent
    optional input) followed by the graph inputs ``refs`` whose run-time sizes the kernel reads."""

    fn: KernelFn
    inputs: tuple[int, ...]
    refs: tuple[str, ...] = ()


@dataclass
class Node:
    """One ONNX node as a converter sees it."""

    op: str
    name: str
    attributes: Mapping[str, Any]
    values: Sequence[Value | None]
    outputs: Sequence[str]
    opset: int
    float_dtype: torch.dtype | None = None
    matmul_dtype: torch.dtype | None = None
    """Where set, convolutions and matrix products whose weights the converter stores in this dtype compute in it
    and hand back ``float_dtype``: mixed precision, as ``torch.autocast`` runs bf16."""
    _used: set[str] = field(default_factory=set)

    def fail(self, why: str) -> ModelError:
        return ModelError(f"ONNX node {self.name!r} ({self.op}): {why}")

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)

    def has(self, index: int) -> bool:
        return index < len(self.values) and self.values[index] is not None

    def static(self, index: int) -> npt.NDArray[Any]:
        """Input ``index`` as an array; it must be known when converting."""
        value = self.values[index] if self.has(index) else None
        if isinstance(value, Static):
            return value.array
        if isinstance(value, ShapeVec) and all(isinstance(e, int) for e in value.elements):
            return np.array(value.elements, np.int64).reshape(() if value.scalar else (-1,))
        raise self.fail(f"input {index} must be a constant known when converting (it is computed at run time)")

    def scalar(self, index: int) -> float:
        """A one-element constant input as a float."""
        return float(self.static(index).reshape(-1)[0])

    def ints(self, index: int) -> list[int]:
        return [int(v) for v in self.static(index).reshape(-1)]

    def shape(self, index: int) -> list[ShapeElement]:
        """A shape input: sizes, some of which may be run-time dimensions."""
        value = self.values[index] if self.has(index) else None
        if isinstance(value, ShapeVec):
            return list(value.elements)
        return list[ShapeElement](self.ints(index))

    def axes(self, index: int) -> list[int] | None:
        """Axes from the ``axes`` attribute (older opsets) or input ``index`` (newer); ``None`` if neither."""
        attribute = self.attr("axes")
        if attribute is not None:
            return [int(a) for a in attribute]
        return self.ints(index) if self.has(index) else None

    def dtype(self, onnx_type: int) -> torch.dtype:
        """The torch dtype for ONNX type ``onnx_type``; floating types become the compute dtype if one is set."""
        if onnx_type not in TORCH_DTYPES:
            raise self.fail(f"element type {TensorProto.DataType.Name(onnx_type)} is not supported")
        dtype = TORCH_DTYPES[onnx_type]
        return self.float_dtype if self.float_dtype is not None and dtype.is_floating_point else dtype


Converter = Callable[[Node], Kernel]
OPS: dict[str, Converter] = {}
"""Converters by ONNX operator name."""


def _op(*names: str) -> Callable[[Converter], Converter]:
    def register(converter: Converter) -> Converter:
        for name in names:
            OPS[name] = converter
        return converter

    return register


def _resolve(shape: Sequence[ShapeElement], refs: Sequence[str], tensors: Sequence[Tensor]) -> list[int]:
    by_name = dict(zip(refs, tensors, strict=True))
    return [e if isinstance(e, int) else int(by_name[e.value].shape[e.axis]) for e in shape]


def _refs(shape: Sequence[ShapeElement]) -> tuple[str, ...]:
    return tuple(sorted({e.value for e in shape if isinstance(e, DimRef)}))


# Element-wise ------------------------------------------------------------------------------------------------

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


@_op(*_UNARY)
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


@_op(*_BINARY)
def _binary(node: Node) -> Kernel:
    return Kernel(_BINARY[node.op], (0, 1))


@_op("Min", "Max")
def _min_max(node: Node) -> Kernel:
    pick = torch.minimum if node.op == "Min" else torch.maximum

    def run(*xs: Tensor) -> Tensor:
        result = xs[0]
        for x in xs[1:]:
            result = pick(result, x)
        return result

    return Kernel(run, tuple(range(len(node.values))))


@_op("Where")
def _where(node: Node) -> Kernel:
    return Kernel(torch.where, (0, 1, 2))


@_op("LeakyRelu")
def _leaky_relu(node: Node) -> Kernel:
    slope = float(node.attr("alpha", 0.01))
    return Kernel(lambda x: F.leaky_relu(x, slope), (0,))


@_op("PRelu")
def _prelu(node: Node) -> Kernel:
    # ONNX broadcasts the slope (often [C, 1, 1]); F.prelu wants it 1-D.
    return Kernel(lambda x, slope: torch.where(x < 0, x * slope, x), (0, 1))


@_op("Clip")
def _clip(node: Node) -> Kernel:
    if node.opset < 11:
        low, high = node.attr("min"), node.attr("max")
    else:
        low = node.scalar(1) if node.has(1) else None
        high = node.scalar(2) if node.has(2) else None
    if low is None and high is None:
        return Kernel(lambda x: x, (0,))
    return Kernel(lambda x: torch.clamp(x, low, high), (0,))


@_op("Gelu")
def _gelu(node: Node) -> Kernel:
    approximate = str(node.attr("approximate", b"none").decode())
    return Kernel(lambda x: F.gelu(x, approximate=approximate), (0,))


@_op("Softmax")
def _softmax(node: Node) -> Kernel:
    if node.opset < 13:
        raise node.fail("Softmax before opset 13 (2-D coercion) is not supported")
    axis = int(node.attr("axis", -1))
    return Kernel(lambda x: torch.softmax(x, axis), (0,))


@_op("Cast")
def _cast(node: Node) -> Kernel:
    dtype = node.dtype(int(node.attr("to")))
    return Kernel(lambda x: x.to(dtype), (0,))


# Linear algebra and normalisation ----------------------------------------------------------------------------


def _padding(node: Node, spatial: int) -> tuple[list[int], list[int] | None]:
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


@_op("Conv")
def _conv(node: Node) -> Kernel:
    spatial = _spatial_rank(node, 1)
    if spatial not in _CONV:
        raise node.fail(f"{spatial}-D convolution is not supported")
    conv = _CONV[spatial]
    stride = [int(s) for s in node.attr("strides", [1] * spatial)]
    dilation = [int(d) for d in node.attr("dilations", [1] * spatial)]
    groups = int(node.attr("group", 1))
    padding, explicit = _padding(node, spatial)

    def run(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if explicit is not None:
            x = F.pad(x, explicit)
        low, out = _matmul_types(node, x, weight)
        result = conv(
            x.to(low), weight.to(low), None if bias is None else bias.to(low), stride, padding, dilation, groups
        )
        return result.to(out)

    return Kernel(run, (0, 1, 2))


@_op("ConvTranspose")
def _conv_transpose(node: Node) -> Kernel:
    spatial = _spatial_rank(node, 1)
    if spatial != 2 or node.attr("output_shape") is not None:
        raise node.fail("only 2-D ConvTranspose without output_shape is supported")
    stride = [int(s) for s in node.attr("strides", [1, 1])]
    dilation = [int(d) for d in node.attr("dilations", [1, 1])]
    output_padding = [int(p) for p in node.attr("output_padding", [0, 0])]
    groups = int(node.attr("group", 1))
    padding, explicit = _padding(node, spatial)
    if explicit is not None:
        raise node.fail("asymmetric ConvTranspose padding is not supported")

    def run(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        low, out = _matmul_types(node, x, weight)
        low_bias = None if bias is None else bias.to(low)
        return F.conv_transpose2d(
            x.to(low), weight.to(low), low_bias, stride, padding, output_padding, groups, dilation
        ).to(out)

    return Kernel(run, (0, 1, 2))


@_op("Gemm")
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


@_op("MatMul")
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


@_op("BatchNormalization")
def _batch_norm(node: Node) -> Kernel:
    if int(node.attr("training_mode", 0)):
        raise node.fail("training-mode BatchNormalization is not supported")
    eps = float(node.attr("epsilon", 1e-5))

    def run(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor) -> Tensor:
        return F.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)

    return Kernel(run, (0, 1, 2, 3, 4))


@_op("InstanceNormalization")
def _instance_norm(node: Node) -> Kernel:
    eps = float(node.attr("epsilon", 1e-5))
    return Kernel(lambda x, scale, bias: F.instance_norm(x, weight=scale, bias=bias, eps=eps), (0, 1, 2))


@_op("LayerNormalization")
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


@_op(*_REDUCERS)
def _reduction(node: Node) -> Kernel:
    # ReduceSum took its axes as an input from opset 13, the others from opset 18.
    axes_input = node.opset >= (13 if node.op == "ReduceSum" else 18)
    return _reduce(node, _REDUCERS[node.op], axes_input)


@_op("ArgMax")
def _argmax(node: Node) -> Kernel:
    if node.attr("select_last_index", 0):
        raise node.fail("select_last_index is not supported")
    axis, keep = int(node.attr("axis", 0)), bool(node.attr("keepdims", 1))
    return Kernel(lambda x: torch.argmax(x, axis, keep), (0,))


# Spatial -----------------------------------------------------------------------------------------------------

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


@_op("Pad")
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


@_op("Resize")
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
    padding, explicit = _padding(node, len(kernel))
    if len(kernel) != 2:
        raise node.fail("only 2-D pooling is supported")
    return kernel, stride, padding, explicit, bool(node.attr("ceil_mode", 0))


@_op("MaxPool")
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


@_op("AveragePool")
def _average_pool(node: Node) -> Kernel:
    kernel, stride, padding, explicit, ceil = _pool_args(node)
    if explicit is not None:
        raise node.fail("asymmetric AveragePool padding is not supported")
    include = bool(node.attr("count_include_pad", 0))
    return Kernel(lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil, include), (0,))


@_op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(node: Node) -> Kernel:
    if node.op == "GlobalAveragePool":
        return Kernel(lambda x: x.mean(tuple(range(2, x.dim())), keepdim=True), (0,))
    return Kernel(lambda x: x.amax(tuple(range(2, x.dim())), keepdim=True), (0,))


@_op("DepthToSpace")
def _depth_to_space(node: Node) -> Kernel:
    block, mode = int(node.attr("blocksize")), node.attr("mode", b"DCR").decode()
    if mode == "CRD":
        return Kernel(lambda x: F.pixel_shuffle(x, block), (0,))

    def dcr(x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        x = x.reshape(n, block, block, c // (block * block), h, w).permute(0, 3, 4, 1, 5, 2)
        return x.reshape(n, c // (block * block), h * block, w * block)

    return Kernel(dcr, (0,))


# Shapes and indexing -----------------------------------------------------------------------------------------


@_op("Reshape")
def _reshape(node: Node) -> Kernel:
    shape, refs = node.shape(1), _refs(node.shape(1))
    allow_zero = bool(node.attr("allowzero", 0))

    def run(x: Tensor, *sizes_from: Tensor) -> Tensor:
        wanted = _resolve(shape, refs, sizes_from)
        if not allow_zero:
            wanted = [int(x.shape[i]) if size == 0 else size for i, size in enumerate(wanted)]
        return x.reshape(wanted)

    return Kernel(run, (0,), refs)


@_op("Flatten")
def _flatten(node: Node) -> Kernel:
    axis = int(node.attr("axis", 1))

    def run(x: Tensor) -> Tensor:
        start = axis % x.dim() if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:start]), -1)

    return Kernel(run, (0,))


@_op("Transpose")
def _transpose(node: Node) -> Kernel:
    perm = node.attr("perm")
    if perm is None:
        return Kernel(lambda x: x.permute(*reversed(range(x.dim()))), (0,))
    order = [int(p) for p in perm]
    return Kernel(lambda x: x.permute(order), (0,))


@_op("Unsqueeze")
def _unsqueeze(node: Node) -> Kernel:
    axes = node.axes(1) or []

    def run(x: Tensor) -> Tensor:
        rank = x.dim() + len(axes)
        for axis in sorted(a % rank for a in axes):
            x = x.unsqueeze(axis)
        return x

    return Kernel(run, (0,))


@_op("Squeeze")
def _squeeze(node: Node) -> Kernel:
    axes = node.axes(1)
    if axes is None:
        return Kernel(lambda x: x.squeeze(), (0,))
    return Kernel(lambda x: x.squeeze(tuple(axes)), (0,))


@_op("Concat")
def _concat(node: Node) -> Kernel:
    axis = int(node.attr("axis"))
    return Kernel(lambda *xs: torch.cat(xs, axis), tuple(range(len(node.values))))


@_op("Split")
def _split(node: Node) -> Kernel:
    axis = int(node.attr("axis", 0))
    sizes = [int(s) for s in node.attr("split", [])] or (node.ints(1) if node.has(1) else [])
    count = len(node.outputs)

    def run(x: Tensor) -> tuple[Tensor, ...]:
        chunks = sizes or [math.ceil(x.shape[axis] / count)] * count
        return tuple(torch.split(x, chunks, axis))

    return Kernel(run, (0,))


@_op("Slice")
def _slice(node: Node) -> Kernel:
    if node.opset < 10:
        starts, ends = [int(s) for s in node.attr("starts")], [int(e) for e in node.attr("ends")]
        axes, steps = [int(a) for a in node.attr("axes", range(len(starts)))], [1] * len(starts)
    else:
        starts, ends = node.ints(1), node.ints(2)
        axes = node.ints(3) if node.has(3) else list(range(len(starts)))
        steps = node.ints(4) if node.has(4) else [1] * len(starts)
    if 0 in steps:
        raise node.fail("Slice with a zero step is not valid ONNX")
    cuts = list(zip(axes, starts, ends, steps, strict=True))

    def run(x: Tensor) -> Tensor:
        for axis, start, end, step in cuts:
            x = _cut(x, axis % x.dim(), start, end, step)
        return x

    return Kernel(run, (0,))


def _cut(x: Tensor, axis: int, start: int, end: int, step: int) -> Tensor:
    """``x[start:end:step]`` along ``axis``, clamped as ONNX clamps (Python's slice rules, for these bounds).

    torch's indexing refuses negative steps, which the exporters write for ``flip`` and for the pad amounts of
    ``ReflectionPad2d``/``ReplicationPad2d``: the axis is flipped and sliced forwards instead.
    """
    size = int(x.shape[axis])
    first, stop, stride = slice(start, min(end, INT64_MAX), step).indices(size)
    index: list[slice] = [slice(None)] * x.dim()
    if stride > 0:
        index[axis] = slice(first, stop, stride)
        return x[tuple(index)]
    index[axis] = slice(size - 1 - first, size - 1 - stop, -stride)
    return x.flip(axis)[tuple(index)]


@_op("Gather")
def _gather(node: Node) -> Kernel:
    axis = int(node.attr("axis", 0))

    def run(x: Tensor, indices: Tensor) -> Tensor:
        dim = axis % x.dim()
        positive = torch.where(indices < 0, indices + x.shape[dim], indices)
        picked = x.index_select(dim, positive.reshape(-1))
        return picked.reshape(*x.shape[:dim], *indices.shape, *x.shape[dim + 1 :])

    return Kernel(run, (0, 1))


@_op("Expand")
def _expand(node: Node) -> Kernel:
    shape, refs = node.shape(1), _refs(node.shape(1))

    def run(x: Tensor, *sizes_from: Tensor) -> Tensor:
        wanted = _resolve(shape, refs, sizes_from)
        rank = max(x.dim(), len(wanted))
        have = [1] * (rank - x.dim()) + [int(size) for size in x.shape]
        want = [1] * (rank - len(wanted)) + wanted
        target = [w if h == 1 else h for h, w in zip(have, want, strict=True)]  # ONNX broadcasts both ways
        return x.reshape(have).expand(target)

    return Kernel(run, (0,), refs)


@_op("Tile")
def _tile(node: Node) -> Kernel:
    repeats = node.ints(1)
    return Kernel(lambda x: x.repeat(repeats), (0,))


@_op("ConstantOfShape")
def _constant_of_shape(node: Node) -> Kernel:
    shape, refs = node.shape(0), _refs(node.shape(0))
    proto = node.attr("value")
    fill = np.zeros(1, np.float32) if proto is None else _tensor_array(proto)
    dtype = node.dtype(proto.data_type if proto is not None else TensorProto.FLOAT)
    value = fill.reshape(-1)[0].item()

    def run(*sizes_from: Tensor) -> Tensor:
        return torch.full(_resolve(shape, refs, sizes_from), value, dtype=dtype)

    return Kernel(run, (), refs)


def _tensor_array(proto: Any) -> npt.NDArray[Any]:
    from onnx import numpy_helper

    return np.asarray(numpy_helper.to_array(proto))


# Shape values (Shape → Gather → Unsqueeze → Concat → Reshape): computed when converting -----------------------

ShapeOp = Callable[[Node], Value]
SHAPE_OPS: dict[str, ShapeOp] = {}
"""Operators evaluated when converting on shape values with run-time elements (:class:`ShapeVec`)."""


def _shape_op(name: str) -> Callable[[ShapeOp], ShapeOp]:
    def register(function: ShapeOp) -> ShapeOp:
        SHAPE_OPS[name] = function
        return function

    return register


def shape_value(elements: Sequence[ShapeElement], scalar: bool = False) -> Value:
    """A :class:`Static` int64 array if every element is known, else a :class:`ShapeVec`."""
    if all(isinstance(e, int) for e in elements):
        return Static(np.array(elements, np.int64).reshape(() if scalar else (-1,)))
    return ShapeVec(tuple(elements), scalar)


def _elements(node: Node, index: int) -> tuple[list[ShapeElement], bool]:
    value = node.values[index]
    if isinstance(value, ShapeVec):
        return list(value.elements), value.scalar
    array = node.static(index)
    return [int(v) for v in array.reshape(-1)], array.ndim == 0


@_shape_op("Shape")
def _shape(node: Node) -> Value:
    value = node.values[0]
    dims = value.dims if isinstance(value, Live) else None
    if dims is None or any(d is None for d in dims):
        raise node.fail("the input's shape is not known when converting (run shape inference on the model)")
    known = [d for d in dims if d is not None]
    start, end = node.attr("start", 0), node.attr("end", len(known))
    return shape_value(known[start:end])


@_shape_op("Gather")
def _shape_gather(node: Node) -> Value:
    elements, _ = _elements(node, 0)
    indices = node.static(1)
    picked = [elements[int(i)] for i in indices.reshape(-1)]
    return shape_value(picked, scalar=indices.ndim == 0)


@_shape_op("Unsqueeze")
def _shape_unsqueeze(node: Node) -> Value:
    elements, scalar = _elements(node, 0)
    if not scalar or (node.axes(1) or []) not in ([0], [-1]):
        raise node.fail("only a scalar shape element can be unsqueezed when converting")
    return shape_value(elements)


@_shape_op("Squeeze")
def _shape_squeeze(node: Node) -> Value:
    elements, scalar = _elements(node, 0)
    if scalar or len(elements) != 1:
        raise node.fail("only a one-element shape can be squeezed when converting")
    return shape_value(elements, scalar=True)


@_shape_op("Concat")
def _shape_concat(node: Node) -> Value:
    return shape_value([e for index in range(len(node.values)) for e in _elements(node, index)[0]])


@_shape_op("Slice")
def _shape_slice(node: Node) -> Value:
    elements, _ = _elements(node, 0)
    starts, ends = node.ints(1), node.ints(2)
    steps = node.ints(4) if node.has(4) else [1]
    if steps[0] == 0:
        raise node.fail("Slice with a zero step is not valid ONNX")
    return shape_value(elements[starts[0] : min(ends[0], INT64_MAX) : steps[0]])  # Python clamps as ONNX does


@_shape_op("Cast")
@_shape_op("Identity")
def _shape_same(node: Node) -> Value:
    elements, scalar = _elements(node, 0)
    return shape_value(elements, scalar)
