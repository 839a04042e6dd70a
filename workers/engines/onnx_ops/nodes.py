"""What an operator converter sees and returns: a :class:`Node` (one ONNX node, with what is known of its inputs
when the model is converted), a :class:`Kernel` (the torch function it runs), the value kinds (:class:`Static`,
:class:`ShapeVec`, :class:`Live`) and the registry :data:`OPS` the operator modules fill with :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
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


def register(*names: str) -> Callable[[Converter], Converter]:
    """Register the decorated converter for the ONNX operators ``names``."""

    def register(converter: Converter) -> Converter:
        for name in names:
            OPS[name] = converter
        return converter

    return register


def resolve_sizes(shape: Sequence[ShapeElement], refs: Sequence[str], tensors: Sequence[Tensor]) -> list[int]:
    """``shape`` with each run-time dimension read from the graph input tensors ``tensors`` (named ``refs``)."""
    by_name = dict(zip(refs, tensors, strict=True))
    return [e if isinstance(e, int) else int(by_name[e.value].shape[e.axis]) for e in shape]


def size_refs(shape: Sequence[ShapeElement]) -> tuple[str, ...]:
    """The graph inputs whose run-time sizes ``shape`` reads."""
    return tuple(sorted({e.value for e in shape if isinstance(e, DimRef)}))
