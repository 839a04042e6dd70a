"""What this machine's CPU computes natively, as torch reports it: whether bf16 matrix products run in hardware
(AMX tiles, or AVX-512 BF16 dot products) — the fact ``auto`` engine selection turns on.

:func:`probe_cpu` is the seam: :func:`workers.engines.loading.choose_engine` takes any function that returns a
:class:`CpuCapability`, so tests decide what the machine has.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CpuCapability:
    """The CPU's vector extensions that matter to the engines.

    Attributes:
        isa: torch's name for the widest instruction set it dispatches to (``AVX512``, ``AVX2``, ``DEFAULT`` …).
        amx: AMX tiles (bf16 matrix multiply in hardware; Intel Sapphire Rapids and later).
        avx512_bf16: AVX-512 BF16 dot products (Intel Cooper Lake and later, AMD Zen 4 and later).
        vnni: int8 dot products (AVX-512 VNNI or AVX-VNNI; Intel Cascade Lake and later, AMD Zen 4 and later):
            what makes oneDNN's int8 convolutions faster than bf16 ones.
    """

    isa: str
    amx: bool = False
    avx512_bf16: bool = False
    vnni: bool = False

    @property
    def native_bf16(self) -> bool:
        """Whether bf16 convolutions and matrix products run in hardware (and so faster than fp32)."""
        return self.amx or self.avx512_bf16

    def describe(self) -> str:
        """In words, e.g. ``AVX512 with AVX-512 BF16, no AMX``."""
        bf16 = "AVX-512 BF16" if self.avx512_bf16 else "no AVX-512 BF16"
        return f"{self.isa} with {'AMX' if self.amx else 'no AMX'}, {bf16}, {'VNNI' if self.vnni else 'no VNNI'}"


CpuProbe = Callable[[], CpuCapability]
"""Reports the CPU's capability (the seam of engine selection)."""


@cache
def probe_cpu() -> CpuCapability:
    """This CPU's capability, from torch (its dispatch ISA and oneDNN's checks), or from ``/proc/cpuinfo`` when
    torch is not installed. Importing torch does not initialise CUDA."""
    if importlib.util.find_spec("torch") is None:
        return _from_cpuinfo(Path("/proc/cpuinfo"))
    import torch

    cpu = torch.cpu
    capability = CpuCapability(
        isa=str(torch.backends.cpu.get_cpu_capability()),
        amx=bool(getattr(cpu, "_is_amx_tile_supported", lambda: False)()),
        avx512_bf16=bool(getattr(cpu, "_is_avx512_bf16_supported", lambda: False)()),
        vnni=bool(getattr(cpu, "_is_vnni_supported", getattr(cpu, "_is_avx512_vnni_supported", lambda: False))()),
    )
    logger.debug("CPU capability: %s", capability.describe())
    return capability


def _from_cpuinfo(path: Path) -> CpuCapability:
    try:
        text = path.read_text()
    except OSError:
        return CpuCapability(isa="unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    isa = "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "DEFAULT"
    return CpuCapability(
        isa=isa,
        amx="amx_tile" in flags,
        avx512_bf16="avx512_bf16" in flags,
        vnni=bool(flags & {"avx512_vnni", "avx_vnni"}),
    )
