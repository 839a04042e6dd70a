"""A face detector's ONNX graph converted to torch (:mod:`workers.engines.onnx_to_torch`) and run on the worker's
device: the first step of detection on the device. It is an :class:`~workers.engines.base.Engine`, so
:class:`~workers.faces.detection.FaceDetector` takes it as it takes ONNX Runtime's, with the same pre- and
post-processing (letterbox, decode, NMS on the host); tests/workers/test_device_detection.py holds its faces to
ONNX Runtime's. Not yet in the render path: batching frames through it, and the decode and NMS in torch
(:mod:`workers.device.suppression`), come next.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import torch

from workers.engines.base import Tensor
from workers.engines.onnx_to_torch import convert

__all__ = ["ConvertedDetector"]


class ConvertedDetector:
    """The detector model at ``path`` as torch on ``device`` (eager, fp32).

    Raises:
        ValueError: the converter cannot take the graph (an operator it does not know).
    """

    def __init__(self, path: Path, device: str = "cpu") -> None:
        model = onnx.load(str(path))
        self.device = torch.device(device)
        self.module = convert(model).to(self.device).eval()
        self._inputs = tuple(spec.name for spec in self.module.inputs)
        self._outputs = tuple(spec.name for spec in self.module.outputs)
        self._shape = tuple(d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self._inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._outputs

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        """One batch, as ONNX Runtime runs it: numpy in, numpy out, in the model's output order."""
        tensors = [torch.from_numpy(np.ascontiguousarray(inputs[name])).to(self.device) for name in self._inputs]
        with torch.inference_mode():
            outputs = self.module(*tensors)
        return [output.cpu().numpy() for output in outputs]

    def warmup(self) -> None:
        self.run({self._inputs[0]: np.zeros(self._shape, np.float32)})
