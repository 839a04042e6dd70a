"""int8 for the torch engine: PyTorch 2 static quantisation (PT2E), calibrated on the job's own inputs, guarded.

A model's converted fp32 module is exported (``torch.export``, the batch dimension dynamic), prepared for the x86
Inductor quantiser (int8 activations per tensor, weights per channel: the VNNI path of oneDNN), calibrated on the
first items the engine meets — aligned crops of the job's own frames, so no calibration data is shipped — and
converted (``convert_pt2e``). The engine then compiles it with Inductor's freezing, which folds the quantise /
dequantise pairs into oneDNN's int8 convolutions.

The :func:`guard` holds the int8 outputs on the calibration inputs to the fp32 outputs computed for those same items
(the fp32 run the calibration needs anyway): images at least :data:`MIN_PSNR` dB inside the face (an ellipse
centred on the aligned crop, where its face lies: the paste-back keeps little else), embeddings at least
:data:`MIN_COSINE` cosine similarity. A model that fails runs in bf16 instead, as a visible degradation.

The quantised graph and the verdict are kept with the compile cache (:class:`QuantisedGraphs`), keyed by the model
file's hash and :data:`RECIPE`, so a second process loads them instead of calibrating again.

Import this module only where torch may be imported (see :mod:`workers.engines.torch_engine`).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from workers.engines.cache_files import write_json
from workers.engines.compiling import TRACING

logger = logging.getLogger(__name__)

CALIBRATION_ITEMS = 32
"""Items (faces, frames) the engine calibrates on before it quantises: the first ones of the first job."""
MIN_PSNR = 35.0
"""The least PSNR, in dB, of int8 image outputs against fp32 inside the face (the bf16 path's own bound)."""
MIN_COSINE = 0.99
"""The least cosine similarity of int8 embeddings against fp32."""
EARLY_ITEMS = 8
"""After this many items, the engine quantises a copy calibrated on them alone and holds it to fp32 on them: a
model that misses its bound there by more than :data:`EARLY_MARGIN` is not calibrated further (ranges fitted to the
very items compared are the kind case: a model that fails it fails on more items too)."""
EARLY_MARGIN = 3.0
"""How far below its bound the early check must fall to end calibration (dB; thousandths of cosine)."""
RECIPE = f"pt2e-x86-inductor-static-per-channel-{CALIBRATION_ITEMS}-items-v1"
"""What the quantised graph depends on besides the model file and torch: part of its cache key."""


@cache
def _pt2e() -> tuple[Any, Any, Any, str]:
    """``prepare_pt2e``, ``convert_pt2e``, a configured x86 Inductor quantiser, and where they came from: torchao,
    the home of PT2E since torch 2.10 dropped its own ``torch.ao.quantization.quantize_pt2e`` copy.

    Raises:
        ImportError: torchao is not installed (extra ``torch``).
    """
    import torchao  # registers the quantised ops the converted graph calls
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    class EndsInFloat(x86.X86InductorQuantizer):  # type: ignore[misc]  # untyped
        """The x86 quantiser, leaving the first and last convolutions in fp32 (see :data:`FLOAT_ENDS`)."""

        def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
            annotated: torch.fx.GraphModule = super().annotate(model)
            if FLOAT_ENDS:
                _unannotate_ends(annotated)
            return annotated

    quantizer = EndsInFloat()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    return prepare_pt2e, convert_pt2e, quantizer, f"torchao {torchao.__version__}"


FLOAT_ENDS = True
"""Keep the convolutions that read the model's input and write its output in fp32: a 3-channel image in or out
has too few channels to spread int8's rounding (the reduced inswapper replica: 21.6 dB on d18's faces with them
quantised); they are a small share of the work (the full-size inswapper: ≈ 1 % of its MACs)."""


def _unannotate_ends(graph: torch.fx.GraphModule) -> None:
    convs = [node for node in graph.graph.nodes if node.target is torch.ops.aten.conv2d.default]
    for node in {convs[0], convs[-1]} if convs else set():
        node.meta.pop("quantization_annotation", None)


def quantiser_source() -> str:
    """Which package quantises (``torchao 0.x``), for logs."""
    return _pt2e()[3]


Batch = tuple[torch.Tensor, ...]


def _dynamic_batch(module: torch.nn.Module, example: Batch, batched: Sequence[bool]) -> Any:
    """The ``dynamic_shapes`` of :func:`torch.export.export` for ``module``'s positional inputs: the leading
    dimension of the batched ones, named ``batch`` (under the name of ``*inputs`` where the forward takes them so)."""
    dim = torch.export.Dim("batch", min=1, max=4096)
    specs = tuple({0: dim} if flag and t.dim() else None for t, flag in zip(example, batched, strict=True))
    parameters = inspect.signature(module.forward).parameters.values()
    varargs = next((p.name for p in parameters if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    return {varargs: specs} if varargs is not None else specs


def export(
    module: torch.nn.Module, example: Batch, batched: Sequence[bool], *, strict: bool = False
) -> torch.export.ExportedProgram:
    """``module`` exported for inputs like ``example``, the leading dimension of the ``batched`` ones dynamic.

    ``strict``: traced by dynamo, which records each node's source function (``source_fn_stack``): the x86
    quantiser finds convolutions, linears and the element-wise ops it fuses with them by it, and the non-strict
    tracer records it only for ``nn.Module`` calls, which the converted module has none of."""
    shapes = _dynamic_batch(module, example, batched)
    with TRACING:
        return torch.export.export(module, example, dynamic_shapes=shapes, strict=strict)


def prepare(module: torch.nn.Module, example: Batch, batched: Sequence[bool]) -> torch.nn.Module:
    """``module`` exported for inputs like ``example`` and prepared for PT2E: it computes what ``module`` computes,
    in fp32, and its observers record the ranges each call meets (what :func:`convert` quantises by)."""
    prepare_pt2e, _, quantizer, _ = _pt2e()
    graph = _without_noop_casts(export(module.eval(), example, batched, strict=True).module())
    prepared: torch.nn.Module = prepare_pt2e(graph, quantizer)
    return prepared


def convert(prepared: torch.nn.Module) -> torch.nn.Module:
    """The int8 graph of a module from :func:`prepare` that has run its calibration calls."""
    converted: torch.nn.Module = _pt2e()[1](prepared)
    return converted


def quantise(module: torch.nn.Module, calibration: Sequence[Batch], batched: Sequence[bool]) -> torch.nn.Module:
    """``module`` statically quantised to int8 by PT2E, calibrated on the ``calibration`` batches."""
    prepared = prepare(module, calibration[0], batched)
    with torch.no_grad():
        for batch in calibration:
            prepared(*batch)
    return convert(prepared)


def _without_noop_casts(graph: Any) -> Any:
    """``graph`` without the casts to a tensor's own dtype (and their metadata asserts) that the converter's
    per-step dtype handling leaves in the exported graph: between a convolution and its input or weights they hide
    the patterns the quantiser annotates, and the model would stay fp32."""
    aten = torch.ops.aten
    for node in list(graph.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten._assert_tensor_metadata.default:
            graph.graph.erase_node(node)
        elif node.target is aten.to.dtype and len(node.args) == 2 and not node.kwargs:
            source, dtype = node.args
            value = getattr(source, "meta", {}).get("val")
            if value is not None and value.dtype == dtype:
                node.replace_all_uses_with(source)
                graph.graph.erase_node(node)
    graph.graph.eliminate_dead_code()
    graph.recompile()
    return graph


@dataclass(frozen=True)
class Verdict:
    """How the int8 outputs compared with fp32's on the calibration inputs.

    Attributes:
        passed: every output is within its bound.
        metric: ``psnr_db`` (image outputs, the worst item inside the face) or ``cosine`` (embeddings, the worst).
        figure: the worst item's value of ``metric``.
        bound: the bound it was held to.
        items: how many items were compared.
        model: the model file's name (for ``swapfarm doctor``).
    """

    passed: bool
    metric: str
    figure: float
    bound: float
    items: int
    model: str = ""

    def describe(self) -> str:
        unit = " dB PSNR" if self.metric == "psnr_db" else " cosine"
        relation = ">=" if self.passed else "<"
        return f"int8 vs fp32 on {self.items} calibration items: {self.figure:.4g}{unit} {relation} {self.bound:g}"


def face_ellipse(height: int, width: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The face region of an aligned crop: an ellipse centred on it, 80 % of its width and 90 % of its height."""
    y, x = np.mgrid[0:height, 0:width]
    cy, cx = (height - 1) / 2, (width - 1) / 2
    return bool_(((x - cx) / (0.4 * width)) ** 2 + ((y - cy) / (0.45 * height)) ** 2 <= 1.0)


def bool_(array: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    return np.asarray(array, dtype=np.bool_)


def _psnr_inside(reference: np.ndarray[Any, Any], other: np.ndarray[Any, Any], peak: float) -> float:
    """Per-item PSNR over the face ellipse, the worst item; ``peak`` is the outputs' value range."""
    mask = face_ellipse(reference.shape[-2], reference.shape[-1])
    errors = ((reference - other) ** 2)[..., mask].reshape(len(reference), -1).mean(axis=1)
    worst = float(errors.max())
    return float("inf") if worst == 0 else float(10 * np.log10(peak**2 / worst))


def guard(reference: Sequence[Sequence[torch.Tensor]], quantised: Sequence[Sequence[torch.Tensor]]) -> Verdict:
    """The :class:`Verdict` of int8 outputs against fp32 ones, call by call and output by output.

    Image outputs (``[N, C, H, W]``) are held to :data:`MIN_PSNR` inside the face; vectors (``[N, D]``) to
    :data:`MIN_COSINE`; other outputs (masks of other ranks, scalars) are compared as images where 4-d only.
    """
    worst: Verdict | None = None
    for outputs_ref, outputs_q in zip(reference, quantised, strict=True):
        for ref_t, q_t in zip(outputs_ref, outputs_q, strict=True):
            ref = ref_t.detach().to("cpu", torch.float64).numpy()
            got = q_t.detach().to("cpu", torch.float64).numpy()
            if ref.ndim == 4:
                peak = max(float(ref.max() - ref.min()), 1e-6)
                verdict = _verdict("psnr_db", _psnr_inside(ref, got, peak), MIN_PSNR, len(ref))
            elif ref.ndim == 2:
                dot = (ref * got).sum(axis=1)
                norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1)
                cosine = float((dot / np.maximum(norms, 1e-12)).min())
                verdict = _verdict("cosine", cosine, MIN_COSINE, len(ref))
            else:
                continue
            if worst is None or _margin(verdict) < _margin(worst):
                worst = verdict
    if worst is None:
        raise ValueError("the model has no image or vector output to guard")
    items = sum(len(outputs[0]) for outputs in reference)
    return Verdict(worst.passed, worst.metric, worst.figure, worst.bound, items)


def _verdict(metric: str, figure: float, bound: float, items: int) -> Verdict:
    return Verdict(figure >= bound, metric, figure, bound, items)


def held_to_fp32(graph: torch.nn.Module, calls: Sequence[tuple[Batch, Sequence[torch.Tensor]]]) -> Verdict:
    """The :class:`Verdict` of ``graph`` against the fp32 outputs of ``calls`` (inputs, outputs), call by call: the
    verdict is the worst item's, so the first call that fails decides and the rest are not run."""
    reference: list[Sequence[torch.Tensor]] = []
    quantised: list[tuple[torch.Tensor, ...]] = []
    with torch.inference_mode():
        for inputs, outputs in calls:
            reference.append(outputs)
            quantised.append(tuple(graph(*inputs)))
            verdict = guard(reference, quantised)
            if not verdict.passed:
                break
    return verdict


def far_below(verdict: Verdict) -> bool:
    """Whether ``verdict`` misses its bound by more than :data:`EARLY_MARGIN`."""
    return _margin(verdict) < -EARLY_MARGIN


def _margin(verdict: Verdict) -> float:
    """How far above its bound a verdict is, comparable across metrics (dB over 35; cosine in thousandths)."""
    return verdict.figure - verdict.bound if verdict.metric == "psnr_db" else (verdict.figure - verdict.bound) * 1e3


def model_hash(path: Path) -> str:
    """The SHA-256 of the model file (what its quantised graph was calibrated for)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class QuantisedGraphs:
    """Quantised graphs and their guard verdicts, kept in the compile cache folder.

    Each entry is ``<key>.pt2`` (the converted graph, saved by ``torch.export``) and ``<key>.json`` (its
    :class:`Verdict`); a model that failed its guard has the verdict alone, so no later process calibrates it
    again either. Files are written to a temporary name and renamed: processes sharing the folder never read half
    a graph (two writing at once each write a real calibration; the last rename wins).
    """

    FOLDER = "swapfarm-int8"

    def __init__(self, cache_dir: Path) -> None:
        self.folder = cache_dir / self.FOLDER

    @staticmethod
    def key(model_sha256: str, device: str) -> str:
        """The cache key: the model's hash, the recipe, the device and the torch version."""
        raw = f"{model_sha256}:{RECIPE}:{device}:{torch.__version__}:{quantiser_source()}"
        return hashlib.sha256(raw.encode()).hexdigest()[:32]

    def verdict(self, key: str) -> Verdict | None:
        try:
            return Verdict(**json.loads((self.folder / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def load(self, key: str) -> torch.nn.Module | None:
        """The quantised graph kept under ``key``, or ``None`` if there is none (or it cannot be read)."""
        path = self.folder / f"{key}.pt2"
        if not path.exists():
            return None
        _pt2e()  # the quantised ops must be registered before the graph is loaded
        try:
            module: torch.nn.Module = torch.export.load(path).module()
        except Exception as error:  # a graph of an older torch, a truncated file: calibrate again
            logger.warning("cannot load the quantised graph %s (%s); calibrating again", path, error)
            return None
        return module

    def store(
        self, key: str, verdict: Verdict, graph: torch.nn.Module | None, example: Batch, batched: Sequence[bool]
    ) -> None:
        """Keep ``verdict`` and, if it passed, ``graph`` (exported again with inputs like ``example``)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            if graph is not None:
                program = export(graph, example, batched)
                with tempfile.NamedTemporaryFile(dir=self.folder, delete=False, suffix=".tmp.pt2") as handle:
                    pass
                torch.export.save(program, handle.name)
                os.replace(handle.name, self.folder / f"{key}.pt2")
            write_json(self.folder / f"{key}.json", asdict(verdict))
        except (OSError, RuntimeError) as error:
            logger.warning("cannot keep the quantised graph in %s: %s", self.folder, error)


@dataclass(frozen=True)
class Int8Plan:
    """What an engine set to int8 needs besides its fp32 module.

    Attributes:
        graphs: where quantised graphs are kept.
        key: this model's entry there (:meth:`QuantisedGraphs.key`).
        bf16: builds the model's bf16 module, run when int8 fails its guard or cannot be quantised.
        items: how many items to calibrate on.
        model: the model file's name (kept with the verdict).
    """

    graphs: QuantisedGraphs
    key: str
    bf16: Callable[[], torch.nn.Module]
    items: int = CALIBRATION_ITEMS
    model: str = ""
