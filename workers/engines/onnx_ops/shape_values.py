"""Shape values (``Shape → Gather → Unsqueeze → Concat → Reshape``), computed when converting on
:class:`~workers.engines.onnx_ops.nodes.ShapeVec` values with run-time elements: registered in :data:`SHAPE_OPS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from workers.engines.onnx_ops.nodes import (
    INT64_MAX,
    Live,
    Node,
    ShapeElement,
    ShapeVec,
    Static,
    Value,
)

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
