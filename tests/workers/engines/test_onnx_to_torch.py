"""The ONNX → torch converter against ONNX Runtime: every supported operator on its own, every replica
architecture as a whole (eager here; compiled in test_torch_engine.py), and what it refuses."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from shared.errors import ModelError
from tests.support import replicas
from workers.engines.onnx_ops import OPS
from workers.engines.onnx_to_torch import convert

Array = npt.NDArray[Any]
RNG = np.random.default_rng(0)
FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _f(*shape: int, low: float = -2.0, high: float = 2.0) -> Array:
    return RNG.uniform(low, high, shape).astype(np.float32)


def _i(*values: int) -> Array:
    return np.array(values, np.int64)


@dataclass
class Case:
    """One node: ``inputs`` are fed at run time, ``constants`` are initializers (``None``: absent optional)."""

    op: str
    inputs: Sequence[tuple[str, Array]] = ()
    constants: Sequence[tuple[str, Array | None]] = ()
    attributes: Mapping[str, Any] = field(default_factory=dict)
    outputs: Sequence[int] = (FLOAT,)
    opset: int = 17
    constants_first: bool = False

    def model(self) -> onnx.ModelProto:
        live = [name for name, _ in self.inputs]
        fixed = [name if value is not None else "" for name, value in self.constants]
        names = [*fixed, *live] if self.constants_first else [*live, *fixed]
        outputs = [f"y{index}" for index in range(len(self.outputs))]
        node = helper.make_node(self.op, names, outputs, name="node", **self.attributes)
        graph = helper.make_graph(
            [node],
            self.op,
            [
                helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                for n, a in self.inputs
            ],
            [helper.make_tensor_value_info(n, t, None) for n, t in zip(outputs, self.outputs, strict=True)],
            [numpy_helper.from_array(a, n) for n, a in self.constants if a is not None],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], ir_version=8)


def _unary(op: str, x: Array | None = None) -> Case:
    return Case(op, [("x", _f(2, 3, 4) if x is None else x)])


def _binary(op: str, a: Array, b: Array, out: int = FLOAT) -> Case:
    return Case(op, [("a", a), ("b", b)], outputs=(out,))


POSITIVE = _f(2, 3, 4, low=0.1, high=3.0)
CASES: dict[str, Case] = {
    **{op: _unary(op) for op in ("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Neg", "Abs", "Floor", "Ceil", "Identity")},
    "Sqrt": _unary("Sqrt", POSITIVE),
    "Log": _unary("Log", POSITIVE),
    "Reciprocal": _unary("Reciprocal", POSITIVE),
    "Not": Case("Not", [("x", RNG.random((3, 4)) > 0.5)], outputs=(BOOL,)),
    **{op: _binary(op, _f(2, 3, 4), _f(3, 1)) for op in ("Add", "Sub", "Mul")},
    "Div": _binary("Div", _f(2, 3, 4), POSITIVE[0]),
    "Div-int": _binary("Div", _i(-7, 7, 9), _i(2, 2, -4), INT64),
    "Pow": _binary("Pow", POSITIVE, _f(4)),
    **{
        op: _binary(op, _i(1, 5, 3), _i(3, 5, 1), BOOL)
        for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual")
    },
    **{op: _binary(op, RNG.random(5) > 0.5, RNG.random(5) > 0.5, BOOL) for op in ("And", "Or")},
    "Min": Case("Min", [("a", _f(2, 3)), ("b", _f(3)), ("c", _f(2, 1))]),
    "Max": Case("Max", [("a", _f(2, 3)), ("b", _f(3)), ("c", _f(2, 1))]),
    "Where": Case("Where", [("c", RNG.random((2, 3)) > 0.5), ("a", _f(2, 3)), ("b", _f(3))]),
    "LeakyRelu": Case("LeakyRelu", [("x", _f(2, 3))], attributes={"alpha": 0.2}),
    "PRelu": Case("PRelu", [("x", _f(2, 4, 3, 3))], [("slope", _f(4, 1, 1))]),
    "Clip": Case(
        "Clip", [("x", _f(2, 3, 4))], [("low", np.array(-0.5, np.float32)), ("high", np.array(1, np.float32))]
    ),
    "Clip-open": Case("Clip", [("x", _f(2, 3))]),
    "Gelu": Case("Gelu", [("x", _f(2, 3))], opset=20),
    "Softmax": Case("Softmax", [("x", _f(2, 3, 4))], attributes={"axis": 1}),
    "Cast": Case("Cast", [("x", _f(2, 3) * 4)], attributes={"to": INT64}, outputs=(INT64,)),
    "Cast-fp16": Case(
        "Cast", [("x", _f(2, 3))], attributes={"to": TensorProto.FLOAT16}, outputs=(TensorProto.FLOAT16,)
    ),
    "Conv": Case(
        "Conv",
        [("x", _f(2, 4, 9, 9))],
        [("w", _f(6, 2, 3, 3)), ("b", _f(6))],
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "group": 2, "dilations": [1, 1]},
    ),
    "Conv-asymmetric": Case("Conv", [("x", _f(1, 3, 8, 8))], [("w", _f(4, 3, 3, 3))], {"pads": [0, 1, 2, 1]}),
    "Conv-dilated-1d": Case("Conv", [("x", _f(2, 3, 16))], [("w", _f(4, 3, 3)), ("b", _f(4))], {"dilations": [2]}),
    "ConvTranspose": Case(
        "ConvTranspose",
        [("x", _f(2, 4, 5, 5))],
        [("w", _f(4, 3, 3, 3)), ("b", _f(3))],
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]},
    ),
    "Gemm": Case("Gemm", [("a", _f(3, 5))], [("w", _f(4, 5)), ("c", _f(4))], {"transB": 1}),
    "Gemm-scaled": Case(
        "Gemm", [("a", _f(5, 3))], [("w", _f(5, 4)), ("c", _f(1, 4))], {"transA": 1, "alpha": 0.5, "beta": 2.0}
    ),
    "MatMul": Case("MatMul", [("a", _f(2, 3, 4)), ("b", _f(4, 5))]),
    "BatchNormalization": Case(
        "BatchNormalization",
        [("x", _f(2, 3, 4, 4))],
        [("s", _f(3)), ("b", _f(3)), ("m", _f(3)), ("v", _f(3, low=0.5, high=2.0))],
        {"epsilon": 1e-3},
    ),
    "InstanceNormalization": Case("InstanceNormalization", [("x", _f(2, 3, 5, 5))], [("s", _f(3)), ("b", _f(3))]),
    "LayerNormalization": Case(
        "LayerNormalization", [("x", _f(2, 3, 8))], [("s", _f(8)), ("b", _f(8))], {"axis": -1, "epsilon": 1e-5}
    ),
    "ReduceMean": Case("ReduceMean", [("x", _f(2, 3, 4, 5))], attributes={"axes": [2, 3], "keepdims": 1}),
    "ReduceMean-18": Case("ReduceMean", [("x", _f(2, 3, 4))], [("axes", _i(-1))], {"keepdims": 0}, opset=18),
    "ReduceMean-all": Case("ReduceMean", [("x", _f(2, 3, 4))], attributes={"keepdims": 0}),
    "ReduceSum": Case("ReduceSum", [("x", _f(2, 3, 4))], [("axes", _i(1))]),
    "ReduceMax": Case("ReduceMax", [("x", _f(2, 3, 4))], attributes={"axes": [0]}),
    "ReduceMin": Case("ReduceMin", [("x", _f(2, 3, 4))], attributes={"axes": [2], "keepdims": 0}),
    "ReduceL2": Case("ReduceL2", [("x", _f(2, 512))], attributes={"axes": [1]}),
    "ArgMax": Case("ArgMax", [("x", _f(2, 7, 3))], attributes={"axis": 1, "keepdims": 0}, outputs=(INT64,)),
    "Pad": Case("Pad", [("x", _f(1, 2, 4, 4))], [("p", _i(0, 0, 1, 2, 0, 1, 3, 0)), ("v", np.array(0.5, np.float32))]),
    "Pad-reflect": Case("Pad", [("x", _f(1, 2, 6, 6))], [("p", _i(0, 0, 3, 3, 0, 0, 3, 3))], {"mode": "reflect"}),
    "Pad-edge": Case("Pad", [("x", _f(1, 2, 4, 4))], [("p", _i(0, 0, 1, 0, 0, 0, 2, 1))], {"mode": "edge"}),
    "Resize-linear": Case(
        "Resize",
        [("x", _f(1, 2, 5, 6))],
        [("roi", None), ("scales", np.array([1, 1, 2, 2], np.float32))],
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
    ),
    "Resize-corners": Case(
        "Resize",
        [("x", _f(1, 2, 5, 6))],
        [("roi", None), ("scales", None), ("sizes", _i(1, 2, 9, 7))],
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    ),
    "Resize-nearest": Case(
        "Resize",
        [("x", _f(1, 2, 4, 4))],
        [("roi", None), ("scales", np.array([1, 1, 2, 3], np.float32))],
        {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
    ),
    "Resize-nearest-exact": Case(
        "Resize",
        [("x", _f(1, 2, 6, 6))],
        [("roi", None), ("scales", None), ("sizes", _i(1, 2, 9, 4))],
        {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"},
    ),
    "MaxPool": Case(
        "MaxPool", [("x", _f(1, 2, 9, 9))], attributes={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1] * 4}
    ),
    "MaxPool-ceil": Case(
        "MaxPool", [("x", _f(1, 2, 8, 8))], attributes={"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}
    ),
    "AveragePool": Case("AveragePool", [("x", _f(1, 2, 8, 8))], attributes={"kernel_shape": [2, 2], "strides": [2, 2]}),
    "GlobalAveragePool": _unary("GlobalAveragePool", _f(2, 3, 4, 5)),
    "GlobalMaxPool": _unary("GlobalMaxPool", _f(2, 3, 4, 5)),
    "DepthToSpace-CRD": Case("DepthToSpace", [("x", _f(1, 8, 3, 3))], attributes={"blocksize": 2, "mode": "CRD"}),
    "DepthToSpace-DCR": Case("DepthToSpace", [("x", _f(1, 8, 3, 3))], attributes={"blocksize": 2, "mode": "DCR"}),
    "Reshape": Case("Reshape", [("x", _f(2, 3, 4))], [("shape", _i(0, -1, 2))]),
    "Flatten": Case("Flatten", [("x", _f(2, 3, 4, 5))], attributes={"axis": 2}),
    "Transpose": Case("Transpose", [("x", _f(2, 3, 4))], attributes={"perm": [1, 2, 0]}),
    "Transpose-reverse": _unary("Transpose", _f(2, 3, 4)),
    "Unsqueeze": Case("Unsqueeze", [("x", _f(2, 3))], [("axes", _i(0, -1))]),
    "Squeeze": Case("Squeeze", [("x", _f(2, 1, 3, 1))], [("axes", _i(1))]),
    "Squeeze-all": _unary("Squeeze", _f(2, 1, 3, 1)),
    "Concat": Case("Concat", [("a", _f(2, 3)), ("b", _f(2, 5))], attributes={"axis": 1}),
    "Split": Case("Split", [("x", _f(2, 7))], [("split", _i(3, 4))], {"axis": 1}, outputs=(FLOAT, FLOAT)),
    "Split-even": Case("Split", [("x", _f(6, 2))], outputs=(FLOAT, FLOAT, FLOAT)),
    "Slice": Case(
        "Slice", [("x", _f(4, 10, 6))], [("s", _i(1, -8)), ("e", _i(2**63 - 1, 9)), ("a", _i(0, 1)), ("t", _i(1, 3))]
    ),
    "Gather": Case("Gather", [("x", _f(3, 5, 2))], [("i", np.array([[0, -1], [2, 3]], np.int64))], {"axis": 1}),
    "Gather-scalar": Case("Gather", [("x", _f(4, 3))], [("i", np.array(2, np.int64))]),
    "Expand": Case("Expand", [("x", _f(3, 1))], [("shape", _i(2, 1, 4))]),
    "Tile": Case("Tile", [("x", _f(2, 3))], [("r", _i(2, 3))]),
    "ConstantOfShape": Case(
        "ConstantOfShape",
        constants=[("shape", _i(2, 3))],
        attributes={"value": numpy_helper.from_array(np.array([1.5], np.float32))},
    ),
}


def _run(model: onnx.ModelProto, feeds: Mapping[str, Array], float_dtype: torch.dtype | None = None) -> list[Array]:
    module = convert(model, float_dtype=float_dtype)
    with torch.inference_mode():
        outputs = module(*[torch.from_numpy(np.asarray(feeds[spec.name])) for spec in module.inputs])
    return [output.numpy() for output in outputs]


def _reference(model: onnx.ModelProto, feeds: Mapping[str, Array]) -> list[Array]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs: list[Array] = session.run(None, dict(feeds))
    return outputs


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_operator_matches_onnxruntime(name: str) -> None:
    case = CASES[name]
    model = case.model()
    feeds = dict(case.inputs)
    expected, actual = _reference(model, feeds), _run(model, feeds)
    for want, got in zip(expected, actual, strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_every_registered_operator_is_tested() -> None:
    tested = {case.op for case in CASES.values()} | {"Constant", "Shape"}  # those two: the shape-chain test below
    assert set(OPS) - tested == set()


REPLICAS: Mapping[str, Callable[[], onnx.ModelProto]] = {
    "inswapper_128": replicas.inswapper_128,
    "hyperswap_1a_256": replicas.hyperswap_1a_256,
    "simswap_256": replicas.simswap_256,
    "crossface_simswap": replicas.crossface_simswap,
    "arcface_w600k_r50": replicas.arcface_w600k_r50,
    "gfpgan_1.4": replicas.gfpgan_1_4,
    "gpen_bfr_512": replicas.gpen_bfr_512,
    "codeformer": replicas.codeformer,
}


def _feeds(model: onnx.ModelProto, batch: int) -> dict[str, Array]:
    feeds: dict[str, Array] = {}
    for value in model.graph.input:
        dims = [d.dim_value or batch for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == TensorProto.DOUBLE:
            feeds[value.name] = np.array([0.3])
        else:
            feeds[value.name] = RNG.uniform(-1, 1, dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", sorted(REPLICAS))
def test_each_replica_architecture_matches_onnxruntime_in_eager_mode(name: str) -> None:
    model = REPLICAS[name]()
    feeds = _feeds(model, batch=3)
    for want, got in zip(_reference(model, feeds), _run(model, feeds, torch.float32), strict=True):
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4


def test_the_fp16_inswapper_computes_in_half_precision_or_in_the_compute_dtype() -> None:
    model = replicas.inswapper_128(fp16=True)
    feeds = _feeds(model, batch=2)
    (want,) = _reference(model, feeds)
    (as_fp16,) = _run(model, feeds, float_dtype=None)  # the file's own types: fp16 inside, f32 at the edges
    (as_fp32,) = _run(model, feeds, float_dtype=torch.float32)  # normalised: the fp16 weights computed in fp32
    assert as_fp16.dtype == as_fp32.dtype == np.float32
    assert np.abs(as_fp16 - want).max() <= 3e-2  # fp16 rounding on both sides; outputs are in [0, 1]
    assert np.abs(as_fp32 - want).max() <= 3e-2


def _shape_chain_model() -> onnx.ModelProto:
    """``y = (x.reshape(N, C·H·W) @ w).reshape(N, 2, 4)`` written as PyTorch exports ``view(x.size(0), -1)``:
    Shape → Gather → Unsqueeze → Concat → Reshape, twice."""
    g = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0, np.int64))),
        helper.make_node("Gather", ["shape", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["x", "flat_shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["h"]),
        helper.make_node("Slice", ["shape", "start", "end"], ["lead"]),
        helper.make_node("Concat", ["lead", "tail"], ["out_shape"], axis=0),
        helper.make_node("Reshape", ["h", "out_shape"], ["y"]),
    ]
    initializers = [
        numpy_helper.from_array(_i(0), "axes"),
        numpy_helper.from_array(_i(-1), "minus_one"),
        numpy_helper.from_array(_f(48, 8), "w"),
        numpy_helper.from_array(_i(0), "start"),
        numpy_helper.from_array(_i(1), "end"),
        numpy_helper.from_array(_i(2, 4), "tail"),
    ]
    graph = helper.make_graph(
        g,
        "chain",
        [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", FLOAT, ["N", 2, 4])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_shape_chains_are_resolved_when_converting_and_trace_as_one_graph() -> None:
    model = _shape_chain_model()
    module = convert(model)
    assert module.operator_count == 3  # Reshape, MatMul, Reshape: the shape arithmetic is gone
    for batch in (1, 5):
        feeds = {"x": _f(batch, 3, 4, 4)}
        np.testing.assert_allclose(_run(model, feeds)[0], _reference(model, feeds)[0], rtol=1e-5, atol=1e-5)
    explained = torch._dynamo.explain(module)(torch.from_numpy(_f(2, 3, 4, 4)))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)


def test_an_unsupported_operator_is_refused_by_name() -> None:
    case = Case("NonMaxSuppression", [("boxes", _f(1, 4, 4)), ("scores", _f(1, 1, 4))], outputs=(INT64,))
    with pytest.raises(ModelError, match="NonMaxSuppression"):
        convert(case.model())


def test_a_shape_computed_from_data_is_refused_with_the_node_named() -> None:
    case = Case("Reshape", [("x", _f(2, 3)), ("shape", _i(3, 2))], outputs=(FLOAT,))
    with pytest.raises(ModelError, match="'node' \\(Reshape\\).*constant"):
        convert(case.model())
