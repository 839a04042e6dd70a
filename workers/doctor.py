"""``swapfarm doctor``: what this machine offers a worker, and what will fall back.

:func:`diagnose` gathers facts (accelerator family and devices, torch and ONNX Runtime with their providers, the
engine each heavy model gets, ffmpeg with its hardware encoders and decoders and which of them work — probed by a
one-frame encode and decode, :mod:`workers.video.codecs` — the compile cache) and judges
them: a *warning* is something that works but not as configured (CUDA asked for, CPU used), an *error* something
a worker cannot do without (no ffmpeg, no usable ONNX Runtime provider). :func:`render` prints the report.
The parsing of ffmpeg's listings is pure (:func:`hardware_codecs`), tested without running ffmpeg.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from shared.errors import FfmpegError, ModelError
from shared.families import GPU_FAMILIES, AcceleratorFamily
from shared.options import Enhancer, Swapper, choices
from shared.settings import Settings
from workers.device.selection import frame_path_engine
from workers.engines.capability import probe_cpu
from workers.engines.family import detect_family, torch_build
from workers.engines.loading import EngineChoice, choose_engine, compile_mode, max_batch
from workers.video import codecs

HARDWARE_CODECS = re.compile(r"nvenc|cuvid|_nvdec|vaapi|qsv|amf|videotoolbox|v4l2m2m|_mf\b|_vulkan|rkmpp|_d3d12va")
"""Names of ffmpeg encoders and decoders that use hardware."""

HEAVY_MODELS: tuple[str, ...] = (*choices(Swapper), *choices(Enhancer))
"""The models whose engine the doctor reports: every swapper and enhancer a job can choose."""


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

        from workers.engines.onnx import choose_providers
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
    if family == "cpu":
        report.add("engines", "cpu", probe_cpu().describe())
    choices = {model: choose_engine(settings, family, model) for model in HEAVY_MODELS}
    by_choice: dict[EngineChoice, list[str]] = {}
    for model, choice in choices.items():
        by_choice.setdefault(choice, []).append(model)
    for choice, models in by_choice.items():
        report.add("engines", ", ".join(models), f"{choice.engine} {choice.precision} — {choice.reason}")
    if any(choice.engine == "torch" for choice in choices.values()):
        report.add("engines", "torch compile", f"mode {compile_mode(settings, family)}, "
                   f"buckets up to {max_batch(settings, family)}, compiled when first used")  # fmt: skip
        if not torch_build():
            report.errors.append("a model is set to the torch engine but torch is not installed")
        elif family in GPU_FAMILIES and not _cuda_usable():
            report.errors.append(f"a model is set to the torch engine on {family}, but torch sees no GPU")
    frames = frame_path_engine(settings, family)
    path = "the device path (torch)" if frames.engine == "torch" else "the OpenCV path"
    report.add("engines", "frames", f"{path} — {frames.reason}")
    report.add("engines", "memory", f"safety fraction {settings.memory_safety_fraction}, RAM budget "
               f"{_bytes(settings.ram_budget_bytes) if settings.ram_budget_bytes else 'free memory'}")  # fmt: skip


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
