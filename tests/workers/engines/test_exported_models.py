"""The converter takes what ``torch.onnx.export`` writes: small modules of the layers face models are built from,
exported by both exporters (the TorchScript-based one and the dynamo one) with a dynamic batch, converted and run
against ONNX Runtime on the same file.

The TorchScript exporter writes a padding layer's amounts as graph arithmetic (ConstantOfShape → Concat → Reshape
→ Slice with step −1 → Transpose → Cast → Pad) and ``flip`` as a negative-step Slice on the tensor; the dynamo
exporter writes a plain Pad but keeps the negative-step Slice for ``flip``.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

from workers.engines.onnx_to_torch import convert

Array = npt.NDArray[Any]
TOLERANCE = 1e-4
"""Max abs difference, converted (eager, fp32) vs ONNX Runtime, on inputs in [-2, 2]."""


class Flip(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flip(x, [2, 3])


class ReversedChannels(nn.Module):
    """A flip followed by a slice whose bounds the exporter computes from the input's shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x.flip(1)[:, : x.shape[1] // 2]], 1)


class WhereExpand(nn.Module):
    """``expand(-1, -1, H, W)`` from the run-time shape and ``torch.where``: the exporters' shape idioms."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=(2, 3), keepdim=True).expand(-1, -1, x.shape[2], x.shape[3])
        return torch.where(x > 0, x, mean) * x.new_ones(x.shape[0], 1, 1, 1).expand_as(x)


class PaddedConv(nn.Module):
    """The inswapper stem: reflection padding, a 7×7 convolution, instance norm, LeakyReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.ReflectionPad2d(3), nn.Conv2d(4, 8, 7), nn.InstanceNorm2d(8, affine=True), nn.LeakyReLU(0.2)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stem(x)


LAYERS: dict[str, Callable[[], nn.Module]] = {
    "reflection_pad": lambda: nn.ReflectionPad2d((1, 2, 3, 0)),
    "replication_pad": lambda: nn.ReplicationPad2d(2),
    "zero_pad": lambda: nn.ZeroPad2d((1, 0, 2, 1)),
    "pixel_shuffle": lambda: nn.PixelShuffle(2),
    "pixel_unshuffle": lambda: nn.PixelUnshuffle(2),
    "instance_norm": lambda: nn.InstanceNorm2d(4, affine=True),
    "instance_norm_plain": lambda: nn.InstanceNorm2d(4),
    "upsample_nearest": lambda: nn.Upsample(scale_factor=2, mode="nearest"),
    "upsample_bilinear": lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
    "upsample_bilinear_corners": lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
    "upsample_bicubic": lambda: nn.Upsample(scale_factor=2, mode="bicubic", align_corners=False),
    "flip": Flip,
    "reversed_channels": ReversedChannels,
    "where_expand": WhereExpand,
    "padded_conv": PaddedConv,
}


def export(module: nn.Module, *, dynamo: bool) -> onnx.ModelProto:
    """``module`` exported with a dynamic batch by one of torch's two exporters."""
    module.eval()
    example = (torch.randn(2, 4, 8, 8),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer notes
        if dynamo:
            batch = torch.export.Dim("N", min=1, max=64)
            program = torch.onnx.export(module, example, dynamo=True, dynamic_shapes=({0: batch},),
                                        input_names=["x"], output_names=["y"], verbose=False)  # fmt: skip
            assert program is not None
            return program.model_proto
        buffer = io.BytesIO()
        torch.onnx.export(module, example, buffer, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})  # fmt: skip
        return onnx.load_from_string(buffer.getvalue())


def _onnxruntime(model: onnx.ModelProto, x: Array) -> Array:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {session.get_inputs()[0].name: x})[0])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("name", sorted(LAYERS))
def test_an_exported_layer_converts_and_matches_onnxruntime(name: str, dynamo: bool) -> None:
    torch.manual_seed(0)
    model = export(LAYERS[name](), dynamo=dynamo)
    module = convert(model)
    for batch in (1, 3):  # the batch is read at run time, not baked in from the export's example
        x = np.random.default_rng(batch).uniform(-2, 2, (batch, 4, 8, 8)).astype(np.float32)
        with torch.inference_mode():
            (got,) = module(torch.from_numpy(x))
        want = _onnxruntime(model, x)
        assert got.shape == want.shape
        assert np.abs(got.numpy() - want).max() <= TOLERANCE


def test_the_torchscript_exporter_writes_padding_as_a_negative_step_slice() -> None:
    """The pattern the issue met in a real model (the reason this file exists) is still what the exporter
    writes: otherwise the test above would no longer cover it."""
    model = export(nn.ReflectionPad2d(3), dynamo=False)
    slices = [node for node in model.graph.node if node.op_type == "Slice"]
    assert slices, [node.op_type for node in model.graph.node]
    steps = [
        onnx.numpy_helper.to_array(node.attribute[0].t) for node in model.graph.node if node.output[0] in
        {s.input[4] for s in slices if len(s.input) > 4}
    ]  # fmt: skip
    assert any((step < 0).all() for step in steps)
