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

The package holds one module per family of operators (:mod:`.elementwise`, :mod:`.linalg`, :mod:`.spatial`,
:mod:`.indexing`), the shape arithmetic done when converting (:mod:`.shape_values`) and what they share
(:mod:`.nodes`); importing the package registers them all.
"""

from workers.engines.onnx_ops import elementwise, indexing, linalg, spatial  # noqa: F401  (they fill OPS)
from workers.engines.onnx_ops.nodes import (
    OPS,
    TORCH_DTYPES,
    Converter,
    DimRef,
    Kernel,
    Live,
    Node,
    ShapeElement,
    ShapeVec,
    Static,
    Value,
)
from workers.engines.onnx_ops.shape_values import SHAPE_OPS, shape_value

__all__ = [
    "OPS",
    "SHAPE_OPS",
    "TORCH_DTYPES",
    "Converter",
    "DimRef",
    "Kernel",
    "Live",
    "Node",
    "ShapeElement",
    "ShapeVec",
    "Static",
    "Value",
    "shape_value",
]
