"""Which engine and precision a heavy model runs with on a worker (:func:`choose_engine`), and the compile settings
that follow from the worker's family: ``settings.engine`` (``settings.model_engines`` per model), and ``auto``'s
choice per machine. :func:`workers.engines.loading.load_model` acts on it; ``swapfarm doctor`` prints it.

:func:`~workers.engines.capability.probe_cpu` is the seam: tests decide what the CPU computes natively.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from shared.families import GPU_FAMILIES, AcceleratorFamily
from shared.settings import CompileMode, EngineName, Precision, Settings
from workers.engines.capability import CpuProbe, probe_cpu

GPU_MAX_BATCH = 64


def torch_installed() -> bool:
    return importlib.util.find_spec("torch") is not None


def pt2e_installed() -> bool:
    """Whether PyTorch 2 quantisation (torchao's PT2E) is there for the torch engine's int8."""
    return torch_installed() and importlib.util.find_spec("torchao") is not None


@dataclass(frozen=True)
class EngineChoice:
    """The engine and precision a model runs with on this machine, and why (``swapfarm doctor`` prints it)."""

    engine: EngineName
    precision: Precision
    reason: str
    trial: bool = False
    """Whether the model is put on trial against ONNX Runtime on first use (:mod:`workers.engines.trials`), with
    ``engine`` and ``precision`` the contender's: unless a kept trial says otherwise, it starts on ONNX Runtime."""


def choose_engine(
    settings: Settings, family: AcceleratorFamily, model: str, *, cpu: CpuProbe = probe_cpu
) -> EngineChoice:
    """The engine for ``model`` on a worker of ``family``: the model's override, else ``settings.engine``.

    ``auto`` resolves to the compiled torch engine on CUDA/ROCm (if torch is installed). On a ``cpu`` worker that
    computes bf16 natively (AMX or AVX-512 BF16, as ``cpu()`` reports), the model is put on trial: it starts on ONNX
    Runtime fp32 and is timed against the compiled torch engine, which runs it in int8 where the CPU has int8 dot
    products (VNNI) and PT2E is installed — calibrated on the job's first items and held to fp32 by its guard, in
    bf16 where it fails — and in bf16 elsewhere; the faster is kept. With int8 set (``torch_precision``), torch
    int8 with no trial. ONNX Runtime everywhere else (fp32, OpenVINO, CoreML).
    """
    wanted = settings.model_engines.get(model, settings.engine)
    precision = _precision(settings, family, cpu)
    if wanted == "onnxruntime":
        return EngineChoice("onnxruntime", "fp32", "ONNX Runtime, as set")
    if wanted == "torch":
        return EngineChoice("torch", precision, f"compiled torch in {precision}, as set")
    if not torch_installed():
        return EngineChoice("onnxruntime", "fp32", "auto: torch is not installed")
    if family in GPU_FAMILIES:
        return EngineChoice("torch", precision, f"auto: compiled torch on {family} (measured faster than ONNX Runtime)")
    if family != "cpu":
        return EngineChoice("onnxruntime", "fp32", f"auto: ONNX Runtime with the {family} provider")
    capability = cpu()
    if precision == "int8":
        return EngineChoice(
            "torch",
            "int8",
            f"auto with int8 set ({capability.describe()}): compiled torch in int8 (PT2E), "
            "calibrated on the first faces, held to fp32 by its guard (bf16 where it fails)",
        )
    if not capability.native_bf16:
        return EngineChoice(
            "onnxruntime", "fp32", f"auto: the CPU has no native bf16 ({capability.describe()}): ONNX Runtime fp32"
        )
    if precision != "bf16":
        return EngineChoice("onnxruntime", "fp32", f"auto: torch precision set to {precision}: ONNX Runtime fp32")
    timed = (
        "where it runs the model faster than ONNX Runtime fp32, timed on its first use (starting on ONNX Runtime) and "
        "kept with the compile cache"
    )
    if settings.torch_precision == "auto" and capability.vnni and pt2e_installed():
        return EngineChoice(
            "torch",
            "int8",
            f"auto: the CPU computes bf16 natively and int8 with VNNI ({capability.describe()}): compiled torch in "
            "int8 (PT2E, calibrated on the model's first inputs, held to fp32 by its guard, bf16 where it fails) "
            + timed,
            trial=True,
        )
    return EngineChoice(
        "torch",
        "bf16",
        f"auto: the CPU computes bf16 natively ({capability.describe()}): compiled torch in bf16 {timed} (crops "
        "within 35 dB PSNR of fp32)",
        trial=True,
    )


def _precision(settings: Settings, family: AcceleratorFamily, cpu: CpuProbe) -> Precision:
    if settings.torch_precision != "auto":
        return settings.torch_precision
    if family != "cpu":
        return "fp32"
    # Under auto, int8 is a trial's contender only (choose_engine), never run untimed: a model whose guard fails
    # (the swapper replicas, 24 dB against 35: docs/engines.md) then costs a first job background work, not speed.
    return "bf16" if cpu().native_bf16 else "fp32"


def compile_mode(settings: Settings, family: AcceleratorFamily) -> CompileMode:
    """``settings.torch_compile_mode``, with ``auto`` as max-autotune on CUDA/ROCm (by design: CUDA graphs and
    autotuned kernels) and ``default`` on the CPU, where max-autotune only autotunes matrix-product templates — the
    linear layers, a sliver of a face model's work — and measured no faster (benchmarks/face_swap_cpu.py
    ``--levers``)."""
    if settings.torch_compile_mode != "auto":
        return settings.torch_compile_mode
    return "max-autotune" if family in GPU_FAMILIES else "default"


def max_batch(settings: Settings, family: AcceleratorFamily) -> int:
    """The largest batch bucket before fitting to memory."""
    if settings.torch_max_batch is not None:
        return settings.torch_max_batch
    return GPU_MAX_BATCH if family in GPU_FAMILIES else settings.batch_size
