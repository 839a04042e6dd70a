"""Shapes and indexing on run-time tensors: Reshape, Transpose, Concat, Slice, Gather, Expand …"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from onnx import TensorProto

from workers.engines.onnx_ops.nodes import (
    INT64_MAX,
    Kernel,
    Node,
    Tensor,
    register,
    resolve_sizes,
    size_refs,
)


@register("Reshape")
def _reshape(node: Node) -> Kernel:
    shape, refs = node.shape(1), size_refs(node.shape(1))
    allow_zero = bool(node.attr("allowzero", 0))

    def run(x: Tensor, *sizes_from: Tensor) -> Tensor:
        wanted = resolve_sizes(shape, refs, sizes_from)
        if not allow_zero:
            wanted = [int(x.shape[i]) if size == 0 else size for i, size in enumerate(wanted)]
        return x.reshape(wanted)

    return Kernel(run, (0,), refs)


@register("Flatten")
def _flatten(node: Node) -> Kernel:
    axis = int(node.attr("axis", 1))

    def run(x: Tensor) -> Tensor:
        start = axis % x.dim() if axis < 0 else axis
        return x.reshape(math.prod(x.shape[:start]), -1)

    return Kernel(run, (0,))


@register("Transpose")
def _transpose(node: Node) -> Kernel:
    perm = node.attr("perm")
    if perm is None:
        return Kernel(lambda x: x.permute(*reversed(range(x.dim()))), (0,))
    order = [int(p) for p in perm]
    return Kernel(lambda x: x.permute(order), (0,))


@register("Unsqueeze")
def _unsqueeze(node: Node) -> Kernel:
    axes = node.axes(1) or []

    def run(x: Tensor) -> Tensor:
        rank = x.dim() + len(axes)
        for axis in sorted(a % rank for a in axes):
            x = x.unsqueeze(axis)
        return x

    return Kernel(run, (0,))


@register("Squeeze")
def _squeeze(node: Node) -> Kernel:
    axes = node.axes(1)
    if axes is None:
        return Kernel(lambda x: x.squeeze(), (0,))
    return Kernel(lambda x: x.squeeze(tuple(axes)), (0,))


@register("Concat")
def _concat(node: Node) -> Kernel:
    axis = int(node.attr("axis"))
    return Kernel(lambda *xs: torch.cat(xs, axis), tuple(range(len(node.values))))


@register("Split")
def _split(node: Node) -> Kernel:
    axis = int(node.attr("axis", 0))
    sizes = [int(s) for s in node.attr("split", [])] or (node.ints(1) if node.has(1) else [])
    count = len(node.outputs)

    def run(x: Tensor) -> tuple[Tensor, ...]:
        chunks = sizes or [math.ceil(x.shape[axis] / count)] * count
        return tuple(torch.split(x, chunks, axis))

    return Kernel(run, (0,))


@register("Slice")
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


@register("Gather")
def _gather(node: Node) -> Kernel:
    axis = int(node.attr("axis", 0))

    def run(x: Tensor, indices: Tensor) -> Tensor:
        dim = axis % x.dim()
        positive = torch.where(indices < 0, indices + x.shape[dim], indices)
        picked = x.index_select(dim, positive.reshape(-1))
        return picked.reshape(*x.shape[:dim], *indices.shape, *x.shape[dim + 1 :])

    return Kernel(run, (0, 1))


@register("Expand")
def _expand(node: Node) -> Kernel:
    shape, refs = node.shape(1), size_refs(node.shape(1))

    def run(x: Tensor, *sizes_from: Tensor) -> Tensor:
        wanted = resolve_sizes(shape, refs, sizes_from)
        rank = max(x.dim(), len(wanted))
        have = [1] * (rank - x.dim()) + [int(size) for size in x.shape]
        want = [1] * (rank - len(wanted)) + wanted
        target = [w if h == 1 else h for h, w in zip(have, want, strict=True)]  # ONNX broadcasts both ways
        return x.reshape(have).expand(target)

    return Kernel(run, (0,), refs)


@register("Tile")
def _tile(node: Node) -> Kernel:
    repeats = node.ints(1)
    return Kernel(lambda x: x.repeat(repeats), (0,))


@register("ConstantOfShape")
def _constant_of_shape(node: Node) -> Kernel:
    shape, refs = node.shape(0), size_refs(node.shape(0))
    proto = node.attr("value")
    fill = np.zeros(1, np.float32) if proto is None else _tensor_array(proto)
    dtype = node.dtype(proto.data_type if proto is not None else TensorProto.FLOAT)
    value = fill.reshape(-1)[0].item()

    def run(*sizes_from: Tensor) -> Tensor:
        return torch.full(resolve_sizes(shape, refs, sizes_from), value, dtype=dtype)

    return Kernel(run, (), refs)


def _tensor_array(proto: Any) -> npt.NDArray[Any]:
    from onnx import numpy_helper

    return np.asarray(numpy_helper.to_array(proto))
