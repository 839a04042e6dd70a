"""Which accelerator family this worker has: the setting if given, else what the installed runtimes offer.

Families are tried in the order of :data:`shared.families.FAMILIES`, by the providers and torch build its specs
name. Detection never initialises CUDA: it runs in the Celery prefork parent (the ``worker`` command), and a parent that
has touched CUDA hands its children a context they cannot use. So torch is not imported here: its build (CUDA,
ROCm or CPU) is read from its ``version.py`` and devices from the driver's device nodes.
"""

from __future__ import annotations

import importlib.util
import logging
import platform
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from shared.families import FAMILIES, AcceleratorFamily
from shared.settings import Settings
from shared.tasks import render_queues

logger = logging.getLogger(__name__)


def family_from_providers(providers: Iterable[str]) -> AcceleratorFamily | None:
    """The family implied by the first accelerator provider in ``providers``; ``None`` for CPU only."""
    available = set(providers)
    return next((spec.name for spec in FAMILIES.values() if available & set(spec.accelerated_providers)), None)


def torch_build() -> dict[str, str | None]:
    """The installed torch's version and the CUDA/HIP versions it was built for (``None``: not built for it),
    read from its ``version.py`` without importing torch; empty if torch is not installed."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return {}
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
    except OSError:
        return {}
    found = {
        key: re.search(rf"^{key}\b[^=]*=\s*'([^']*)'", text, re.MULTILINE) for key in ("__version__", "cuda", "hip")
    }
    return {key: match.group(1) if match else None for key, match in found.items()}


def _family_from_torch(dev: Path = Path("/dev")) -> AcceleratorFamily | None:
    build = torch_build()
    for spec in FAMILIES.values():
        if spec.torch_build and spec.device_nodes and build.get(spec.torch_build) and any(dev.glob(spec.device_nodes)):
            return spec.name
    if build and sys.platform == "darwin" and platform.machine() == "arm64":
        return "mps"
    return None


def detect_family(settings: Settings) -> AcceleratorFamily:
    """``settings.family`` unless it is ``"auto"``; then what ONNX Runtime's providers imply, then torch's build
    with the driver's device nodes (:func:`torch_build`; torch is not imported), else ``"cpu"``."""
    if settings.family != "auto":
        return settings.family
    import onnxruntime

    family = family_from_providers(onnxruntime.get_available_providers()) or _family_from_torch() or "cpu"
    logger.info("accelerator family: %s (detected)", family)
    return family


def refused_render_queues(
    family: str, providers: Iterable[str], chosen: Sequence[str] | None = None
) -> tuple[frozenset[str], str | None]:
    """The render queues a worker of ``family`` must not consume with these ONNX Runtime ``providers``, and why.

    A CUDA or ROCm worker whose ONNX Runtime lacks the family's GPU provider (a CPU wheel installed over the GPU
    one, a driver library missing) would render its family's chunks on the CPU, many times slower and silently.
    It refuses ``render.<family>`` and ``render.any`` instead, and says so. Providers the operator ``chosen``
    explicitly (``SWAPFARM_EXECUTION_PROVIDERS``) are a decision, not a fallback: nothing is refused.

    >>> refused_render_queues("cuda", ["CPUExecutionProvider"])[0] == {"render.cuda", "render.any"}
    True
    >>> refused_render_queues("cuda", ["CUDAExecutionProvider", "CPUExecutionProvider"])
    (frozenset(), None)
    """
    spec = next((spec for spec in FAMILIES.values() if spec.name == family), None)
    wanted = spec.accelerated_providers if spec is not None and spec.gpu else None
    offered = set(providers)
    if wanted is None or offered & set(wanted) or chosen:
        return frozenset(), None
    own, anywhere = render_queues(family)
    reason = (
        f"this {family} worker's ONNX Runtime offers {sorted(offered)}, none of {list(wanted)}: it would render on "
        f"the CPU, so it takes no {own} or {anywhere} work (install the family's ONNX Runtime build, "
        f"check the driver libraries with `swapfarm doctor`)"
    )
    return frozenset({own, anywhere}), reason
