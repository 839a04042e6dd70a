"""Synthetic replicas of the face models: random weights, the real I/O and layout (docs/MODELS.md).

Each builder returns an ``onnx.ModelProto`` whose inputs and outputs have the real names, dtypes and shapes
(with a dynamic batch dimension ``N`` unless ``batch`` fixes it), so the pre/post-processing and the engine
run on them exactly as on the real files. ``inswapper_128`` keeps the real layer widths at ``width=1.0``
(≈174.6 GMAC per face, 554 MB) for benchmarks and keeps the real initializer layout (``emap`` last); the
other models are reduced. :func:`install_replica` writes a replica under the registry's file name, where
``resolve`` finds it (with ``allow_model_hash_mismatch``, as a replica's hash is its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper, numpy_helper

from shared.settings import Settings
from workers.models.registry import REGISTRY

OPSET = 17
IR_VERSION = 8
REDUCED_WIDTH = 1 / 32
"""The ``width`` tests use: inswapper's channels ÷ 32 (stem 4, encoder 8/16/32)."""

Batch = int | str


class _Graph:
    """A small ONNX graph builder: nodes in order, initializers in the order their layers are built."""

    def __init__(self, seed: int, dtype: type[np.floating] = np.float32) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, op: str) -> str:
        self._count += 1
        return f"/{op}_{self._count}"

    def constant(self, array: npt.NDArray[np.generic], name: str | None = None) -> str:
        name = name or self.name("const")
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def param(self, shape: Sequence[int], std: float, name: str | None = None, mean: float = 0.0) -> str:
        values = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        values *= np.float32(std)  # in place: the full-size swapper draws 0.55 GB of weights
        values += np.float32(mean)
        return self.constant(values.astype(self.dtype, copy=False), name)

    def node(self, op: str, inputs: Sequence[str], **attributes: Any) -> str:
        name = self.name(op)
        self.nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attributes))
        return name

    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        pad: int = 0,
        names: tuple[str, str] | None = None,
        gain: float = 1.0,
    ) -> str:
        weight_name, bias_name = names or (None, None)
        weight = self.param((cout, cin, kernel, kernel), gain * np.sqrt(2.0 / (cin * kernel * kernel)), weight_name)
        bias = self.param((cout,), 0.01, bias_name)
        return self.node("Conv", [x, weight, bias], kernel_shape=[kernel, kernel], strides=[stride] * 2, pads=[pad] * 4)

    def reflect(self, x: str, pad: int) -> str:
        return self.node(
            "Pad", [x, self.constant(np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64))], mode="reflect"
        )

    def leaky(self, x: str, alpha: float) -> str:
        return self.node("LeakyRelu", [x], alpha=alpha)

    def upsample(self, x: str) -> str:
        scales = self.constant(np.array([1, 1, 2, 2], np.float32))
        return self.node("Resize", [x, "", scales], mode="linear", coordinate_transformation_mode="half_pixel")

    def instance_norm(self, x: str, eps: float) -> str:
        """Instance norm spelt out (ReduceMean/Sub/Mul/Sqrt), as inswapper and SimSwap export it."""
        mean = self.node("ReduceMean", [x], axes=[2, 3], keepdims=1)
        centred = self.node("Sub", [x, mean])
        variance = self.node("ReduceMean", [self.node("Mul", [centred, centred])], axes=[2, 3], keepdims=1)
        std = self.node("Sqrt", [self.node("Add", [variance, self.constant(np.array(eps, self.dtype))])])
        return self.node("Div", [centred, std])

    def style(self, latent: str, channels: int, names: tuple[str, str] | None = None) -> tuple[str, str]:
        """A ``Gemm 512 → 2C`` style linear split into per-channel ``[N, C, 1, 1]`` scale and shift."""
        weight_name, bias_name = names or (None, None)
        weight = self.param((2 * channels, 512), 1.0 / np.sqrt(512), weight_name)
        bias = self.constant(np.concatenate([np.ones(channels), np.zeros(channels)]).astype(self.dtype), bias_name)
        both = self.node("Gemm", [latent, weight, bias], transB=1)
        axes = self.constant(np.array([2, 3], np.int64))
        halves = [
            self.node(
                "Slice",
                [
                    both,
                    self.constant(np.array([start], np.int64)),
                    self.constant(np.array([stop], np.int64)),
                    self.constant(np.array([1], np.int64)),
                ],
            )
            for start, stop in ((0, channels), (channels, 2 * channels))
        ]
        return self.node("Unsqueeze", [halves[0], axes]), self.node("Unsqueeze", [halves[1], axes])

    def cast(self, x: str, to: int) -> str:
        return self.node("Cast", [x], to=to)

    def rename(self, x: str, name: str) -> None:
        self.nodes.append(helper.make_node("Identity", [x], [name], name=f"/output_{name}"))

    def model(
        self,
        inputs: Sequence[onnx.ValueInfoProto],
        outputs: Sequence[onnx.ValueInfoProto],
        name: str,
        check: bool = True,
    ) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, list(inputs), list(outputs), self.initializers)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="swapfarm-replica"
        )
        model.ir_version = IR_VERSION
        if check:
            onnx.checker.check_model(model)
        return model


def _image(name: str, batch: Batch, size: int, channels: int = 3) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, channels, size, size])


def _vector(name: str, batch: Batch, length: int = 512) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, length])


def realistic_emap(seed: int = 0) -> npt.NDArray[np.float32]:
    """A ``[512, 512]`` f32 matrix with the real emap's entry statistics (mean 0.0005, std 0.172), so a unit
    vector maps to a norm of about 3.9 as with the real one."""
    return np.random.default_rng(seed).normal(0.0005, 0.172, size=(512, 512)).astype(np.float32)


def inswapper_128(
    *, width: float = REDUCED_WIDTH, seed: int = 0, fp16: bool = False, batch: Batch = "N"
) -> onnx.ModelProto:
    """inswapper_128 (or its fp16 file): ``target`` [N,3,128,128] + ``source`` [N,512] → ``output`` in [0, 1].

    ``width=1.0`` has the real layer widths: stem 128, encoder 256/512/1024, 6 style blocks at 1024 with
    ``Gemm 512→2048`` style linears and a manual instance norm (≈174.6 GMAC per face). The initializers carry
    the real names and order, ``emap`` (f32 [512, 512]) last. ``fp16`` computes in half precision behind f32
    inputs and output (keep_io_types), as FaceFusion's fp16 file does.
    """
    channels = [max(1, round(c * width)) for c in (128, 256, 512, 1024)]
    stem, enc1, enc2, enc3 = channels
    g = _Graph(seed, np.float16 if fp16 else np.float32)
    target, source = "target", "source"
    if fp16:
        target, source = g.cast(target, TensorProto.FLOAT16), g.cast(source, TensorProto.FLOAT16)
    h = g.leaky(g.conv(g.reflect(target, 3), 3, stem, 7, names=("onnx::Conv_833", "onnx::Conv_834")), 0.2)
    h = g.leaky(g.conv(h, stem, enc1, 3, pad=1, names=("onnx::Conv_836", "onnx::Conv_837")), 0.2)
    h = g.leaky(g.conv(h, enc1, enc2, 3, stride=2, pad=1, names=("onnx::Conv_839", "onnx::Conv_840")), 0.2)
    h = g.leaky(g.conv(h, enc2, enc3, 3, stride=2, pad=1, names=("onnx::Conv_842", "onnx::Conv_843")), 0.2)
    for block in range(6):
        residual = h
        for half in (1, 2):
            prefix = f"styles.{block}"
            h = g.conv(
                g.reflect(h, 1),
                enc3,
                enc3,
                3,
                names=(f"{prefix}.conv{half}.1.weight", f"{prefix}.conv{half}.1.bias"),
            )
            h = g.instance_norm(h, 1e-8)
            gamma, beta = g.style(
                source, enc3, (f"{prefix}.style{half}.linear.weight", f"{prefix}.style{half}.linear.bias")
            )
            h = g.node("Add", [g.node("Mul", [h, gamma]), beta])
            h = g.node("Relu", [h]) if half == 1 else h
        h = g.node("Add", [h, residual])
    h = g.leaky(g.conv(g.upsample(h), enc3, enc2, 3, pad=1, names=("onnx::Conv_845", "onnx::Conv_846")), 0.2)
    h = g.leaky(g.conv(g.upsample(h), enc2, enc1, 3, pad=1, names=("onnx::Conv_848", "onnx::Conv_849")), 0.2)
    h = g.leaky(g.conv(h, enc1, stem, 3, pad=1, names=("onnx::Conv_851", "onnx::Conv_852")), 0.2)
    h = g.node("Tanh", [g.conv(g.reflect(h, 3), stem, 3, 7, names=("up0.1.weight", "up0.1.bias"))])
    one, half_of = g.constant(np.array(1.0, g.dtype)), g.constant(np.array(0.5, g.dtype))
    h = g.node("Mul", [g.node("Add", [h, one]), half_of])  # (x + 1) / 2
    g.rename(g.cast(h, TensorProto.FLOAT) if fp16 else h, "output")
    g.constant(realistic_emap(seed), "emap")  # unused by the graph; the last initializer, as in the real file
    return g.model(
        [_image("target", batch, 128), _vector("source", batch)],
        [_image("output", batch, 128)],
        "inswapper_128",
        check=width != 1.0,  # the checker sees the same nodes at every width: 2 s of 0.55 GB to check again
    )


def identity_swapper(*, batch: Batch = "N") -> onnx.ModelProto:
    """A swapper with inswapper's I/O and emap that returns its ``target`` input unchanged."""
    g = _Graph(0)
    g.rename("target", "output")
    g.constant(realistic_emap(), "emap")
    return g.model([_image("target", batch, 128), _vector("source", batch)], [_image("output", batch, 128)], "identity")


def constant_colour_swapper(colour_bgr: tuple[int, int, int], *, batch: Batch = "N") -> onnx.ModelProto:
    """A swapper with inswapper's I/O and emap whose every output pixel is ``colour_bgr`` (after
    inswapper's post-processing: RGB in [0, 1], converted back to BGR 0–255)."""
    g = _Graph(0)
    rgb = np.array(colour_bgr[::-1], np.float32).reshape(1, 3, 1, 1) / 255.0
    zero = g.node("Mul", ["target", g.constant(np.array(0.0, np.float32))])
    g.rename(g.node("Add", [zero, g.constant(rgb)]), "output")
    g.constant(realistic_emap(), "emap")
    return g.model([_image("target", batch, 128), _vector("source", batch)], [_image("output", batch, 128)], "constant")


def hyperswap_1a_256(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """hyperswap_1a_256, reduced: ``source`` [N,512] + ``target`` [N,3,256,256] → ``output`` [N,3,256,256] in
    [-1, 1], already blended as ``gen·mask + target·(1−mask)``, and ``mask`` [N,1,256,256] in [0, 1]."""
    g = _Graph(seed)
    h = g.leaky(g.conv("target", 3, width, 4, stride=2, pad=1), 0.1)
    h = g.leaky(g.conv(h, width, 2 * width, 4, stride=2, pad=1), 0.1)
    gamma, beta = g.style("source", 2 * width)
    h = g.node("Relu", [g.node("Add", [g.node("Mul", [g.instance_norm(h, 1e-5), gamma]), beta])])
    h = g.node("Relu", [g.conv(g.upsample(h), 2 * width, width, 3, pad=1)])
    generated = g.node("Tanh", [g.conv(g.upsample(h), width, 3, 3, pad=1)])
    mask = g.node("Sigmoid", [g.conv("target", 3, 1, 3, pad=1)])
    inverse = g.node("Sub", [g.constant(np.array(1.0, np.float32)), mask])
    g.rename(g.node("Add", [g.node("Mul", [generated, mask]), g.node("Mul", ["target", inverse])]), "output")
    g.rename(mask, "mask")
    return g.model(
        [_vector("source", batch), _image("target", batch, 256)],
        [_image("output", batch, 256), _image("mask", batch, 256, channels=1)],
        "hyperswap_1a_256",
    )


def simswap_256(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """simswap_256, reduced: ``target`` [N,3,256,256] + ``source`` [N,512] → ``output`` in [0, 1]; AdaIN
    residual blocks apply ``x·(1+s₀) + s₁`` from a ``Linear 512→2C`` of the source."""
    g = _Graph(seed)
    h = g.node("Relu", [g.conv(g.reflect("target", 3), 3, width, 7)])
    h = g.node("Relu", [g.conv(h, width, 2 * width, 3, stride=2, pad=1)])
    for _ in range(2):
        residual = h
        for half in (1, 2):
            h = g.instance_norm(g.conv(g.reflect(h, 1), 2 * width, 2 * width, 3), 1e-8)
            scale, shift = g.style("source", 2 * width)
            h = g.node("Add", [g.node("Mul", [h, scale]), shift])
            h = g.node("Relu", [h]) if half == 1 else h
        h = g.node("Add", [h, residual])
    h = g.node("Relu", [g.conv(g.upsample(h), 2 * width, width, 3, pad=1)])
    h = g.node("Tanh", [g.conv(g.reflect(h, 3), width, 3, 7)])
    h = g.node(
        "Mul",
        [g.node("Add", [h, g.constant(np.array(1.0, np.float32))]), g.constant(np.array(0.5, np.float32))],
    )
    g.rename(h, "output")
    return g.model(
        [_image("target", batch, 256), _vector("source", batch)],
        [_image("output", batch, 256)],
        "simswap_256",
    )


def crossface_simswap(*, width: int = 64, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """crossface_simswap, reduced: ``input`` [N,512] → ``output`` [N,512]: L2-normalise, then an MLP with
    LayerNorm and GELU plus ``0.2·Linear(512→512)`` of the normalised input (real hidden widths
    1024/2048/1024)."""
    g = _Graph(seed)
    unit = g.node("Div", ["input", g.node("ReduceL2", ["input"], axes=[1], keepdims=1)])
    h = unit
    widths = [512, width, 2 * width, width, 512]
    for index, (cin, cout) in enumerate(zip(widths, widths[1:], strict=False)):
        h = g.node("Gemm", [h, g.param((cout, cin), 1.0 / np.sqrt(cin)), g.param((cout,), 0.01)], transB=1)
        if index < len(widths) - 2:
            h = g.node(
                "LayerNormalization",
                [h, g.constant(np.ones(cout, np.float32)), g.constant(np.zeros(cout, np.float32))],
                axis=-1,
            )
            erf = g.node("Erf", [g.node("Mul", [h, g.constant(np.array(1 / np.sqrt(2), np.float32))])])
            h = g.node(
                "Mul",
                [
                    g.node("Mul", [h, g.constant(np.array(0.5, np.float32))]),
                    g.node("Add", [erf, g.constant(np.array(1.0, np.float32))]),
                ],
            )
    skip = g.node("Gemm", [unit, g.param((512, 512), 1.0 / np.sqrt(512)), g.param((512,), 0.01)], transB=1)
    g.rename(g.node("Add", [h, g.node("Mul", [skip, g.constant(np.array(0.2, np.float32))])]), "output")
    return g.model([_vector("input", batch)], [_vector("output", batch)], "crossface_simswap")


def arcface_w600k_r50(*, width: int = 8, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """arcface_w600k_r50, reduced: ``input`` [N,3,112,112] → ``output`` [N,512] (raw, not normalised).

    The first nodes are Conv/PRelu, never ``Sub``/``Mul``, so insightface's router picks mean/std 127.5 as
    for the real file."""
    g = _Graph(seed)
    h = g.conv("input", 3, width, 3, pad=1)
    h = g.node("PRelu", [h, g.constant(np.full((width, 1, 1), 0.25, np.float32))])
    channels = width
    for _ in range(4):  # 112 → 56 → 28 → 14 → 7
        h = g.conv(h, channels, 2 * channels, 3, stride=2, pad=1)
        h = g.node("PRelu", [h, g.constant(np.full((2 * channels, 1, 1), 0.25, np.float32))])
        channels *= 2
    flat = g.node("Flatten", [h], axis=1)
    h = g.node(
        "Gemm",
        [flat, g.param((512, channels * 49), 1.0 / np.sqrt(channels * 49)), g.param((512,), 0.01)],
        transB=1,
    )
    features = [g.constant(np.ones(512, np.float32)), g.constant(np.zeros(512, np.float32))]
    statistics = [g.constant(np.zeros(512, np.float32)), g.constant(np.ones(512, np.float32))]
    g.rename(g.node("BatchNormalization", [h, *features, *statistics], epsilon=1e-5), "output")
    return g.model([_image("input", batch, 112)], [_vector("output", batch)], "arcface_w600k_r50")


def _restorer(g: _Graph, image: str, width: int) -> str:
    """A small encoder–decoder over a 512² image in [-1, 1]: ``image + 0.1·tanh(decoder)``."""
    h = g.leaky(g.conv(image, 3, width, 1), 0.2)
    h = g.leaky(g.conv(h, width, 2 * width, 3, stride=2, pad=1), 0.2)
    h = g.leaky(g.conv(h, 2 * width, 2 * width, 3, stride=2, pad=1), 0.2)
    h = g.leaky(g.conv(g.upsample(h), 2 * width, width, 3, pad=1), 0.2)
    h = g.node("Tanh", [g.conv(g.upsample(h), width, 3, 3, pad=1)])
    return g.node("Mul", [h, g.constant(np.array(0.1, np.float32))])


def gfpgan_1_4(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """gfpgan_1.4, reduced: ``input`` [N,3,512,512] in [-1, 1] → ``output`` [N,3,512,512] (the caller
    clips it)."""
    g = _Graph(seed)
    g.rename(g.node("Add", ["input", _restorer(g, "input", width)]), "output")
    return g.model([_image("input", batch, 512)], [_image("output", batch, 512)], "gfpgan_1.4")


def gpen_bfr_512(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """gpen_bfr_512, reduced: ``input`` [N,3,512,512] in [-1, 1] → ``output`` [N,3,512,512]."""
    g = _Graph(seed)
    g.rename(g.node("Add", ["input", _restorer(g, "input", width)]), "output")
    return g.model([_image("input", batch, 512)], [_image("output", batch, 512)], "gpen_bfr_512")


def codeformer(*, width: int = 4, seed: int = 0, batch: Batch = "N") -> onnx.ModelProto:
    """codeformer, reduced: ``input`` [N,3,512,512] + ``weight`` float64 [1] → ``output`` [N,3,512,512]; the
    restoration is scaled by ``1 − weight``, so weight 1 returns the input (most faithful)."""
    g = _Graph(seed)
    weight = g.cast("weight", TensorProto.FLOAT)
    strength = g.node("Sub", [g.constant(np.array(1.0, np.float32)), weight])
    g.rename(g.node("Add", ["input", g.node("Mul", [_restorer(g, "input", width), strength])]), "output")
    return g.model(
        [_image("input", batch, 512), helper.make_tensor_value_info("weight", TensorProto.DOUBLE, [1])],
        [_image("output", batch, 512)],
        "codeformer",
    )


def replica_settings(models_dir: Path, cache_dir: Path | None = None, **overrides: Any) -> Settings:
    """Settings under which ``resolve`` finds replicas installed in ``models_dir``: hash mismatches allowed
    (a replica's hash is its own), CPU, and no base URLs, so nothing is ever downloaded.

    The heavy models run on ONNX Runtime unless ``engine`` says otherwise: what ``auto`` picks depends on the
    machine's CPU, and compiling is the business of the engine tests (tests/workers/engines/test_torch_engine.py,
    tests/integration/test_face_engine_jobs.py), not of every test that swaps a face."""
    values: dict[str, Any] = {
        "environment": "test",
        "models_dir": models_dir,
        "model_cache_dir": cache_dir or models_dir.parent / "model-cache",
        "allow_model_hash_mismatch": True,
        "family": "cpu",
        "model_base_urls": [],
        "engine": "onnxruntime",
    }
    return Settings(**(values | overrides))


def install_replica(model: onnx.ModelProto, name: str, folder: Path) -> Path:
    """Write ``model`` into ``folder`` under registry model ``name``'s file name; returns the path."""
    path = folder / REGISTRY[name].file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def exported_inswapper(*, width: float = REDUCED_WIDTH, seed: int = 0, dynamo: bool = False) -> onnx.ModelProto:
    """inswapper_128's architecture as a torch module (``ReflectionPad2d``, ``InstanceNorm2d``, bilinear
    ``Upsample``, style linears), written by ``torch.onnx.export`` — as models in the wild are — rather than built
    node by node: the TorchScript exporter (``dynamo=False``, opset 17) writes each reflection pad's amounts as a
    negative-step Slice chain. Same I/O as :func:`inswapper_128` (``emap`` appended as the last initializer)."""
    import io
    import warnings

    import torch
    from torch import nn

    stem, enc1, enc2, enc3 = (max(1, round(c * width)) for c in (128, 256, 512, 1024))

    class Style(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(enc3, enc3, 3))
            self.norm = nn.InstanceNorm2d(enc3)
            self.linear = nn.Linear(512, 2 * enc3)

        def forward(self, x: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
            scale, shift = self.linear(latent)[:, :, None, None].chunk(2, dim=1)
            return self.norm(self.conv(x)) * (1 + 0.1 * scale) + 0.1 * shift

    class Swapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            act = nn.LeakyReLU(0.2)
            self.encoder = nn.Sequential(
                nn.ReflectionPad2d(3), nn.Conv2d(3, stem, 7), act,
                nn.Conv2d(stem, enc1, 3, padding=1), act,
                nn.Conv2d(enc1, enc2, 3, stride=2, padding=1), act,
                nn.Conv2d(enc2, enc3, 3, stride=2, padding=1), act,
            )  # fmt: skip
            self.styles = nn.ModuleList(Style() for _ in range(12))
            self.decoder = nn.Sequential(
                nn.Upsample(scale_factor=2, mode="bilinear"), nn.Conv2d(enc3, enc2, 3, padding=1), act,
                nn.Upsample(scale_factor=2, mode="bilinear"), nn.Conv2d(enc2, enc1, 3, padding=1), act,
                nn.Conv2d(enc1, stem, 3, padding=1), act,
                nn.ReflectionPad2d(3), nn.Conv2d(stem, 3, 7), nn.Tanh(),
            )  # fmt: skip

        def forward(self, target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
            h = self.encoder(target)
            for index in range(0, len(self.styles), 2):
                residual = h
                h = torch.relu(self.styles[index](h, source))
                h = self.styles[index + 1](h, source) + residual
            return (self.decoder(h) + 1) / 2

    torch.manual_seed(seed)
    module = Swapper().eval()
    example = (torch.rand(2, 3, 128, 128), torch.randn(2, 512) * 0.17)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the exporters' deprecation and tracer notes
        if dynamo:
            batch = torch.export.Dim("N", min=1, max=1024)
            program = torch.onnx.export(module, example, dynamo=True, input_names=["target", "source"],
                                        output_names=["output"], dynamic_shapes=({0: batch}, {0: batch}))  # fmt: skip
            assert program is not None
            model = program.model_proto
        else:
            buffer = io.BytesIO()
            torch.onnx.export(module, example, buffer, dynamo=False, opset_version=OPSET,
                              input_names=["target", "source"], output_names=["output"],
                              dynamic_axes={name: {0: "N"} for name in ("target", "source", "output")})  # fmt: skip
            model = onnx.load_from_string(buffer.getvalue())
    model.graph.initializer.append(numpy_helper.from_array(realistic_emap(seed), "emap"))
    return model


def assert_torch_parity(model: onnx.ModelProto) -> None:
    """The torch converter runs ``model`` as ONNX Runtime does: the same outputs within 1e-3 on random inputs (a
    dynamic dimension taken as 2)."""
    import onnxruntime
    import torch

    from workers.engines.onnx_to_torch import convert

    rng = np.random.default_rng(0)
    feeds = {}
    for value in model.graph.input:
        dims = [d.dim_value or 2 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.uniform(-1, 1, dims).astype(np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        actual = module(*[torch.from_numpy(feeds[spec.name]) for spec in module.inputs])
    for want, got in zip(expected, actual, strict=True):
        assert got.shape == want.shape
        assert np.abs(got.numpy() - want).max() <= 1e-3
