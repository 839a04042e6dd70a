"""``swapfarm doctor``: what this machine offers a worker, and what will fall back.

:func:`diagnose` gathers facts (accelerator family and devices, torch and ONNX Runtime with their providers, the
engine and precision each processor's models get, or why one cannot run here (its licence disabled), ffmpeg with
its hardware encoders and decoders and which of them work — probed by a one-frame encode and decode,
:mod:`workers.video.codecs` — the compile cache) and judges them: a *warning* is something that works but not as
configured (CUDA asked for, CPU used), an *error* something a worker cannot do without (no ffmpeg, no usable ONNX
Runtime provider). :func:`render` prints the report.
The parsing of ffmpeg's listings is pure (:func:`hardware_codecs`), tested without running ffmpeg.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shared.errors import FfmpegError, ModelError
from shared.families import GPU_FAMILIES, AcceleratorFamily
from shared.job_models import processor_models
from shared.licences import disabled_models
from shared.options import ProcessorName
from shared.settings import Settings
from workers.engines.capability import probe_cpu
from workers.engines.choosing import EngineChoice, compile_mode, max_batch
from workers.engines.family import detect_family, torch_build
from workers.engines.loading import ONNX_RUNTIME_KINDS, kept_choice
from workers.frames.choice import frame_backend, frame_path_engine
from workers.models.custom import custom_models
from workers.models.registry import REGISTRY
from workers.video import codecs

HARDWARE_CODECS = re.compile(r"nvenc|cuvid|_nvdec|vaapi|qsv|amf|videotoolbox|v4l2m2m|_mf\b|_vulkan|rkmpp|_d3d12va")
"""Names of ffmpeg encoders and decoders that use hardware."""

SHOWN_PER_ROW = 8
"""Models named in one row of the engines section; a row of more says how many more (the deep swapper's 157)."""


def processors_models(settings: Settings) -> dict[ProcessorName, list[str]]:
    """The models whose engine the doctor reports, by processor: every model each processor can load
    (:func:`shared.job_models.processor_models`), and the deep swapper's custom models in the models folder, for
    the processors that load any."""
    found: dict[ProcessorName, list[str]] = {name: processor_models(name) for name in get_args(ProcessorName)}
    found["deep_swapper"] += custom_models(settings)
    return {name: models for name, models in found.items() if models}


@dataclass
class Report:
    """Facts by section (name → rows of label and value), and the judgements."""

    sections: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, section: str, label: str, value: object) -> None:
        self.sections.setdefault(section, []).append((label, str(value)))


def hardware_codecs(listing: str) -> list[str]:
    """The hardware codec names in the output of ``ffmpeg -encoders`` or ``-decoders``.

    Example::

        hardware_codecs(" V....D h264_nvenc   NVIDIA NVENC H.264 encoder") == ["h264_nvenc"]
    """
    names = []
    for line in listing.splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.fullmatch(r"[VAS][.A-Z]{5}", parts[0]) and HARDWARE_CODECS.search(parts[1]):
            names.append(parts[1])
    return names


def _ffmpeg(*args: str) -> str:
    return codecs.listing_of(*args, timeout=30)


def _ffmpeg_section(report: Report, family: AcceleratorFamily) -> None:
    try:
        version = _ffmpeg("-version").splitlines()[0].split(" Copyright")[0]
        hwaccels = [line.strip() for line in _ffmpeg("-hwaccels").splitlines()[1:] if line.strip()]
        encoders, decoders = hardware_codecs(_ffmpeg("-encoders")), hardware_codecs(_ffmpeg("-decoders"))
    except (OSError, FfmpegError, subprocess.SubprocessError) as error:
        report.errors.append(f"ffmpeg is not usable ({error}): a worker cannot decode or encode")
        return
    report.add("ffmpeg", "version", version)
    report.add("ffmpeg", "hwaccels", ", ".join(hwaccels) or "none")
    report.add("ffmpeg", "hardware encoders", ", ".join(encoders) or "none")
    report.add("ffmpeg", "hardware decoders", ", ".join(decoders) or "none")
    support = codecs.probe()
    report.add("ffmpeg", "encoders that work", ", ".join(support.working) or "none (one-frame test encodes)")
    for name, why in support.failed.items():
        report.add("ffmpeg", f"{name} fails", why)
    report.add("ffmpeg", "decode", support.decode_reason)
    if family in GPU_FAMILIES and not support.working:
        report.warnings.append("no hardware encoder works here: chunks are encoded by libx264/libx265 on the CPU")


def _onnxruntime_section(report: Report, settings: Settings, family: AcceleratorFamily) -> None:
    try:
        import onnxruntime

        from workers.engines.onnx import choose_providers, describe_options, provider_options
    except ImportError as error:
        report.errors.append(f"ONNX Runtime is not installed ({error}): detectors and recognisers cannot run")
        return
    available = onnxruntime.get_available_providers()
    report.add("ONNX Runtime", "version", onnxruntime.__version__)
    report.add("ONNX Runtime", "available providers", ", ".join(available))
    try:
        chosen = choose_providers(family, available, settings.execution_providers)
    except ModelError as error:
        report.errors.append(str(error))
        return
    report.add("ONNX Runtime", f"providers for {family}", ", ".join(chosen))
    for provider in chosen:
        if options := provider_options(provider, settings):
            report.add("ONNX Runtime", f"{provider} options", describe_options(options))
    if family in GPU_FAMILIES and chosen[0] == "CPUExecutionProvider":
        report.warnings.append(f"family {family}, but this ONNX Runtime has no GPU provider: ONNX models run on CPU")


def _torch_section(report: Report, settings: Settings, family: AcceleratorFamily) -> None:
    build = torch_build()
    if not build:
        report.add("torch", "installed", "no (extra 'torch'): every model runs on ONNX Runtime")
        return
    import torch

    report.add("torch", "version", torch.__version__)
    report.add("torch", "built for", f"CUDA {build['cuda']}" if build.get("cuda") else f"ROCm {build['hip']}"
               if build.get("hip") else "CPU")  # fmt: skip
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            name = torch.cuda.get_device_name(index)
            report.add("devices", f"cuda:{index}", f"{name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)")
    elif family in GPU_FAMILIES:
        report.warnings.append(f"family {family}, but torch sees no GPU: the torch engine cannot run here")
    mps: Any = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        report.add("devices", "mps", "Apple GPU (Metal)")
    report.add("devices", "cpu", f"{torch.get_num_threads()} threads")


def _engines_section(report: Report, settings: Settings, family: AcceleratorFamily) -> None:
    if family in ("cpu", "openvino"):
        report.add("engines", "cpu", probe_cpu().describe())
    chosen: dict[str, EngineChoice] = {}
    for processor, models in processors_models(settings).items():
        refused = disabled_models(models, settings.disabled_licences)
        by_verdict: dict[str, list[str]] = {}
        for model in models:
            if model in refused:
                verdict = f"not here: its licence ({refused[model]}) is disabled (SWAPFARM_DISABLED_LICENCES)"
            elif model in REGISTRY and REGISTRY[model].kind in ONNX_RUNTIME_KINDS:
                kind = REGISTRY[model].kind.replace("_", " ")
                verdict = f"onnxruntime fp32 — always ONNX Runtime ({kind}: no engine is chosen for it)"
            else:
                choice = chosen.setdefault(model, kept_choice(settings, family, model))
                verdict = f"{choice.engine} {choice.precision} — {choice.reason}"
            by_verdict.setdefault(verdict, []).append(model)
        for verdict, named in by_verdict.items():
            report.add("engines", f"{processor}: {_names(named)}", verdict)
    if any(choice.engine == "torch" for choice in chosen.values()):
        report.add("engines", "torch compile", f"mode {compile_mode(settings, family)}, "
                   f"buckets up to {max_batch(settings, family)}, compiled when first used")  # fmt: skip
        if any(choice.precision == "int8" for choice in chosen.values()):
            report.add("engines", "int8", _int8_line(settings))
        if not torch_build():
            report.errors.append("a model is set to the torch engine but torch is not installed")
        elif family in GPU_FAMILIES and not _cuda_usable():
            report.errors.append(f"a model is set to the torch engine on {family}, but torch sees no GPU")
    frames = frame_path_engine(settings, family)
    path = "4:2:0 planes to the torch device" if frames.engine == "torch" else "whole BGR frames on the host"
    report.add("engines", "frames", f"{path} — {frames.reason}")
    report.add("engines", "frame back-end", _frame_backend(settings, family))
    report.add("engines", "memory", f"safety fraction {settings.memory_safety_fraction}, RAM budget "
               f"{_bytes(settings.ram_budget_bytes) if settings.ram_budget_bytes else 'free memory'}")  # fmt: skip


def _names(models: list[str]) -> str:
    if len(models) <= SHOWN_PER_ROW:
        return ", ".join(models)
    return f"{', '.join(models[:SHOWN_PER_ROW])} and {len(models) - SHOWN_PER_ROW} more"


def _int8_line(settings: Settings) -> str:
    """Where int8 comes from and what the guard kept: each model calibrates on its first 32 inputs, once per
    model file (the verdicts below are kept in the compile cache)."""
    import json
    from importlib import metadata

    try:
        source = f"torchao {metadata.version('torchao')}"
    except metadata.PackageNotFoundError:
        source = "torchao is not installed: int8 cannot run"
    folder = settings.torch_compile_cache_dir.expanduser() / "swapfarm-int8"
    verdicts = []
    for path in sorted(folder.glob("*.json")):
        try:
            kept = json.loads(path.read_text())
            verdicts.append(f"{kept.get('model') or path.stem[:8]}: {'int8' if kept['passed'] else 'bf16'} "
                            f"({kept['metric']} {kept['figure']:.4g})")  # fmt: skip
        except (OSError, ValueError, KeyError, TypeError):
            continue
    kept_text = "; ".join(verdicts) if verdicts else "none calibrated yet (each model calibrates on its first job)"
    return f"PT2E static quantisation ({source}), guard 35 dB / cosine 0.99, bf16 where it fails; kept: {kept_text}"


def _frame_backend(settings: Settings, family: AcceleratorFamily) -> str:
    try:
        return str(frame_backend(settings, family))
    except ModelError as error:  # the family's device is not usable: said in the torch section too
        return f"none: {error}"


def _cuda_usable() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _cache_section(report: Report, settings: Settings) -> None:
    folder = settings.torch_compile_cache_dir.expanduser()
    if not folder.exists():
        report.add("compile cache", str(folder), "empty (not created yet): the first warm-up compiles from scratch")
        return
    files = [path for path in folder.rglob("*") if path.is_file()]
    report.add("compile cache", str(folder), f"{len(files)} files, {_bytes(sum(p.stat().st_size for p in files))}")
    if not _writable(folder):
        report.warnings.append(f"compile cache {folder} is not writable: every worker start compiles again")


def _writable(folder: Path) -> bool:
    probe = folder / ".swapfarm-doctor"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError:
        return False
    return True


def _bytes(count: int) -> str:
    return f"{count / 2**20:.1f} MiB" if count < 2**30 else f"{count / 2**30:.2f} GiB"


def diagnose(settings: Settings) -> Report:
    """Everything ``swapfarm doctor`` prints, judged. Touches the GPU (it runs in its own process)."""
    report = Report()
    family = detect_family(settings)
    report.add("family", "setting", settings.family)
    report.add("family", "in use", family)
    _onnxruntime_section(report, settings, family)
    _torch_section(report, settings, family)
    _engines_section(report, settings, family)
    _cache_section(report, settings)
    _ffmpeg_section(report, family)
    return report


def render(report: Report) -> RenderableType:
    """The report as one table, warnings and errors below it."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    for section, rows in report.sections.items():
        for index, (label, value) in enumerate(rows):
            table.add_row(Text(section if index == 0 else "", style="bold"), label, value)
    lines: Iterable[Text] = [
        *(Text(f"warning: {w}", style="yellow") for w in report.warnings),
        *(Text(f"error: {e}", style="red") for e in report.errors),
    ]
    return Group(table, *lines, Text("ok" if not report.errors else "not ready", style="bold"))
