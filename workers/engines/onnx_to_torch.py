"""An ONNX model as a torch module: the graph's nodes become calls of small per-operator kernels
(:mod:`workers.engines.onnx_ops`), its initializers become the module's buffers.

Whatever can be computed when converting is: constants are folded, and shape arithmetic (``Shape → Gather →
Concat → Reshape``) is resolved against the shapes ONNX shape inference gives, with the batch size read from the
input tensor at run time. What is left is one straight line of torch calls that ``torch.compile`` traces as a
single graph. Unsupported operators are refused by name (:class:`~shared.errors.ModelError`), never skipped.

Example::

    module = convert(onnx.load("inswapper_128.onnx"), float_dtype=torch.float32)
    (swapped,) = module(target, source)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

from shared.errors import ModelError
from workers.engines.onnx_ops import (
    OPS,
    SHAPE_OPS,
    TORCH_DTYPES,
    DimRef,
    Kernel,
    Live,
    Node,
    ShapeElement,
    ShapeVec,
    Static,
    Value,
)

logger = logging.getLogger(__name__)

Dim = int | str | None
"""A declared dimension: a size, a symbolic name, or unknown."""


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output: name, ONNX element type and declared shape."""

    name: str
    elem_type: int
    dims: tuple[Dim, ...]

    @property
    def batched(self) -> bool:
        """Whether the leading dimension is symbolic, i.e. the batch."""
        return bool(self.dims) and isinstance(self.dims[0], str)


@dataclass(frozen=True)
class _Step:
    kernel: Kernel
    args: tuple[str | None, ...]
    outputs: tuple[str, ...]


def _dims(value: onnx.ValueInfoProto) -> tuple[Dim, ...] | None:
    kind = value.type.tensor_type
    if not kind.HasField("shape"):
        return None
    dims: list[Dim] = []
    for dim in kind.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            dims.append(dim.dim_param or None)
    return tuple(dims)


def _attributes(node: onnx.NodeProto) -> dict[str, Any]:
    return {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}


class OnnxModule(torch.nn.Module):
    """The converted model; call it with the graph inputs in :attr:`inputs` order, get a tuple of the outputs."""

    def __init__(
        self,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        steps: Sequence[_Step],
        constants: Mapping[str, torch.Tensor],
    ) -> None:
        super().__init__()
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self._steps = tuple(steps)
        self._constants: dict[str, str] = {}
        for index, (name, tensor) in enumerate(constants.items()):
            attribute = f"constant_{index}"
            self.register_buffer(attribute, tensor)
            self._constants[name] = attribute

    @property
    def operator_count(self) -> int:
        """Kernels left to run after folding."""
        return len(self._steps)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env: dict[str, torch.Tensor] = {spec.name: tensor for spec, tensor in zip(self.inputs, inputs, strict=True)}
        for name, attribute in self._constants.items():
            env[name] = getattr(self, attribute)
        for step in self._steps:
            args = [env[name] if name is not None else None for name in step.args]
            result = step.kernel.fn(*args)
            results = result if isinstance(result, tuple) else (result,)
            for name, tensor in zip(step.outputs, results, strict=False):
                if name:
                    env[name] = tensor
        return tuple(env[spec.name] for spec in self.outputs)


def _to_tensor(array: np.ndarray[Any, Any], float_dtype: torch.dtype | None) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(array, copy=True))
    return tensor.to(float_dtype) if float_dtype is not None and tensor.is_floating_point() else tensor


class _Converter:
    def __init__(
        self,
        model: onnx.ModelProto,
        float_dtype: torch.dtype | None,
        shapes: Sequence[onnx.ValueInfoProto] = (),
        matmul_dtype: torch.dtype | None = None,
    ) -> None:
        self.float_dtype = float_dtype
        self.matmul_dtype = matmul_dtype
        self.opset = next((o.version for o in model.opset_import if o.domain in {"", "ai.onnx"}), 1)
        graph = model.graph
        self.weights = _matmul_weights(graph) if matmul_dtype is not None else set()
        self.values: dict[str, Value] = {i.name: Static(numpy_helper.to_array(i)) for i in graph.initializer}
        self.inputs = [
            TensorSpec(i.name, i.type.tensor_type.elem_type, _dims(i) or ())
            for i in graph.input
            if i.name not in self.values
        ]
        self.outputs = [TensorSpec(o.name, o.type.tensor_type.elem_type, _dims(o) or ()) for o in graph.output]
        self.symbols: dict[str, DimRef] = {}
        for spec in self.inputs:
            for axis, dim in enumerate(spec.dims):
                if isinstance(dim, str):
                    self.symbols.setdefault(dim, DimRef(spec.name, axis))
            self.values[spec.name] = Live(self._known(spec.dims))
        self.shapes = {v.name: _dims(v) for v in (*graph.value_info, *shapes, *graph.output)}
        self.steps: list[_Step] = []

    def _known(self, dims: Sequence[Dim] | None) -> tuple[ShapeElement | None, ...] | None:
        if dims is None:
            return None
        return tuple(d if isinstance(d, int) else self.symbols.get(d) if d else None for d in dims)

    def node(self, proto: onnx.NodeProto) -> None:
        if proto.domain not in {"", "ai.onnx"}:
            raise ModelError(f"ONNX node {proto.name!r}: operator {proto.domain}.{proto.op_type} is not supported")
        if proto.op_type == "Constant":
            self.values[proto.output[0]] = Static(self._constant(proto))
            return
        values = [self.values[name] if name else None for name in proto.input]
        node = Node(
            proto.op_type, proto.name or proto.output[0], _attributes(proto), values, list(proto.output), self.opset,
            self.float_dtype, self.matmul_dtype,
        )  # fmt: skip
        shape_inputs = any(isinstance(v, ShapeVec) for v in values)
        if proto.op_type in SHAPE_OPS and (shape_inputs or proto.op_type == "Shape"):
            self.values[proto.output[0]] = self._shape_op(node)
            return
        if proto.op_type not in OPS:
            raise ModelError(
                f"ONNX operator {proto.op_type} (node {node.name!r}) is not supported by the torch converter; "
                f"supported: {', '.join(sorted(OPS))}"
            )
        kernel = OPS[proto.op_type](node)
        runtime = [values[i] if i < len(values) else None for i in kernel.inputs]
        if any(isinstance(v, ShapeVec) for v in runtime):
            raise node.fail("an input computed from the run-time batch size is used as data; not supported")
        if not kernel.refs and all(v is None or isinstance(v, Static) for v in runtime):
            self._fold(node, kernel, runtime)
            return
        args = tuple(proto.input[i] if i < len(proto.input) and proto.input[i] else None for i in kernel.inputs)
        self.steps.append(_Step(kernel, (*args, *kernel.refs), tuple(proto.output)))
        for name in proto.output:
            if name:
                self.values[name] = Live(self._known(self.shapes.get(name)))

    def _shape_op(self, node: Node) -> Value:
        source = node.values[0]
        if node.op == "Shape" and isinstance(source, Static):
            shape = list(source.array.shape)
            return Static(np.array(shape[node.attr("start", 0) : node.attr("end", len(shape))], np.int64))
        return SHAPE_OPS[node.op](node)

    def _constant(self, proto: onnx.NodeProto) -> np.ndarray[Any, Any]:
        attributes = _attributes(proto)
        if "value" in attributes:
            return np.asarray(numpy_helper.to_array(attributes["value"]))
        for key, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
            if key in attributes:
                return np.asarray(attributes[key], dtype)
        for key in ("value_int", "value_ints"):
            if key in attributes:
                return np.asarray(attributes[key], np.int64)
        raise ModelError(f"ONNX Constant {proto.name!r}: attributes {sorted(attributes)} are not supported")

    def _fold(self, node: Node, kernel: Kernel, runtime: Sequence[Value | None]) -> None:
        tensors = [_to_tensor(v.array, self.float_dtype) if isinstance(v, Static) else None for v in runtime]
        with torch.no_grad():
            result = kernel.fn(*tensors)
        results = result if isinstance(result, tuple) else (result,)
        for name, tensor in zip(node.outputs, results, strict=False):
            if name:
                as_float = tensor.float() if tensor.dtype == torch.bfloat16 else tensor  # numpy has no bfloat16
                self.values[name] = Static(as_float.numpy())

    def module(self) -> OnnxModule:
        needed = {spec.name for spec in self.outputs}
        kept: list[_Step] = []
        for step in reversed(self.steps):
            if any(name in needed for name in step.outputs):
                kept.append(step)
                needed.update(name for name in step.args if name is not None)
        kept.reverse()
        constants: dict[str, torch.Tensor] = {}
        for name in sorted(needed):
            value = self.values.get(name)
            if isinstance(value, Static):
                constants[name] = _to_tensor(
                    value.array, self.matmul_dtype if name in self.weights else self.float_dtype
                )
            elif isinstance(value, ShapeVec):
                raise ModelError(f"ONNX value {name!r} is a run-time shape used as data; not supported")
        return OnnxModule(self.inputs, self.outputs, kept, constants)


def convert(
    model: onnx.ModelProto | Path,
    *,
    float_dtype: torch.dtype | None = torch.float32,
    matmul_dtype: torch.dtype | None = None,
) -> OnnxModule:
    """Convert an ONNX model to an :class:`OnnxModule`.

    Args:
        model: the model, or the path of an ``.onnx`` file.
        float_dtype: the dtype every floating-point tensor computes in (weights, casts, constants); ``None``
            keeps the model's own floating types (an fp16 file computes in fp16).
        matmul_dtype: if set, convolutions and matrix products compute in this dtype (their constant weights are
            stored in it) and everything else in ``float_dtype`` — mixed precision: bf16 where the hardware
            multiplies fast, fp32 for normalisation and activations, which keeps a deep model's output close.

    Raises:
        ModelError: the file cannot be read, or the graph uses an operator (or an operator form) this converter
            does not support; the message names it.
    """
    if isinstance(model, Path):
        try:
            model = onnx.load(str(model))
        except Exception as error:  # onnx raises its own untyped errors for unreadable files
            raise ModelError(f"cannot read ONNX model {model}: {error}") from error
    try:
        shapes = _inferred_shapes(model)
    except Exception as error:  # shape inference is best effort: only Shape nodes need it
        logger.warning("ONNX shape inference failed (%s); Shape nodes will not convert", error)
        shapes = []
    converter = _Converter(model, float_dtype, shapes, matmul_dtype)
    for node in model.graph.node:
        converter.node(node)
    module = converter.module()
    module.eval()
    return module


LOW_PRECISION_OPS = frozenset({"Conv", "ConvTranspose"})
"""Operators whose constant weights go to the matmul dtype: the convolutions, nearly all of a face model's work.
Linear layers (``Gemm``, ``MatMul``: style and embedding projections) cost little and stay in fp32."""


_NORMALISATIONS = frozenset({"InstanceNormalization", "LayerNormalization", "ReduceMean"})
_IMAGE_CHANNELS = 4


def _matmul_weights(graph: onnx.GraphProto) -> set[str]:
    """Initializers read only as the weights or biases of convolutions: stored (and computed) in the matmul dtype
    — except those of the convolutions before the first normalisation (the encoder, whose rounding every later
    layer carries and amplifies) and of the ones that write the image (a handful of output channels), which stay
    in fp32. On the inswapper replica (about a tenth of its work in fp32) this lifts the swapped crops of d18 from
    ≈35 dB to ≈42 dB PSNR of fp32's."""
    dims = {i.name: list(i.dims) for i in graph.initializer}
    normalised: set[str] = set()  # values computed from a normalisation's output
    weights, elsewhere = set[str](), set[str]()
    for node in graph.node:
        after_norm = node.op_type in _NORMALISATIONS or any(name in normalised for name in node.input)
        if after_norm:
            normalised.update(node.output)
        weight = dims.get(node.input[1]) if len(node.input) > 1 else None
        writes_image = bool(weight) and 0 < (weight or [0])[0] <= _IMAGE_CHANNELS
        for position, name in enumerate(node.input):
            if name in dims:
                low = node.op_type in LOW_PRECISION_OPS and position > 0 and after_norm and not writes_image
                (weights if low else elsewhere).add(name)
    return weights - elsewhere


_SMALL = 64
"""Initializers with at most this many elements keep their values for shape inference (shape arithmetic)."""


def _inferred_shapes(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The value shapes ONNX shape inference gives, computed on a copy of the graph whose large initializers are
    declared inputs of the same type and shape: a copy without the weights, so a 550 MB model is not held twice."""
    light = onnx.ModelProto()
    light.CopyFrom(model) if not model.graph.initializer else _copy_without_weights(model, light)
    inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    return list(inferred.graph.value_info)


def _copy_without_weights(model: onnx.ModelProto, light: onnx.ModelProto) -> None:
    graph = model.graph
    light.ir_version, light.producer_name = model.ir_version, model.producer_name
    light.opset_import.extend(model.opset_import)
    small = [i for i in graph.initializer if int(np.prod(i.dims)) <= _SMALL]
    kept = {i.name for i in small}
    large = [
        helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
        for i in graph.initializer
        if i.name not in kept
    ]
    light.graph.CopyFrom(
        helper.make_graph(list(graph.node), graph.name, [*graph.input, *large], list(graph.output), small)
    )
    light.graph.value_info.extend(graph.value_info)


def numpy_dtype(elem_type: int) -> np.dtype[Any]:
    """The numpy dtype of an ONNX element type (for feeding inputs and returning outputs)."""
    if elem_type not in TORCH_DTYPES or elem_type == onnx.TensorProto.BFLOAT16:
        raise ModelError(f"ONNX element type {onnx.TensorProto.DataType.Name(elem_type)} is not supported")
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
