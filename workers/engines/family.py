"""Which accelerator family this worker has: the setting if given, else what the installed runtimes offer."""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Iterable

from shared.options import AcceleratorFamily
from shared.settings import Settings

logger = logging.getLogger(__name__)

# An ONNX Runtime provider that implies a family, in order of preference.
_PROVIDER_FAMILIES: tuple[tuple[str, AcceleratorFamily], ...] = (
    ("TensorrtExecutionProvider", "cuda"),
    ("CUDAExecutionProvider", "cuda"),
    ("MIGraphXExecutionProvider", "rocm"),
    ("ROCMExecutionProvider", "rocm"),
    ("OpenVINOExecutionProvider", "openvino"),
    ("CoreMLExecutionProvider", "mps"),
)


def family_from_providers(providers: Iterable[str]) -> AcceleratorFamily | None:
    """The family implied by the first accelerator provider in ``providers``; ``None`` for CPU only."""
    available = set(providers)
    return next((family for provider, family in _PROVIDER_FAMILIES if provider in available), None)


def _family_from_torch() -> AcceleratorFamily | None:
    if importlib.util.find_spec("torch") is None:
        return None
    torch = importlib.import_module("torch")
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    if torch.backends.mps.is_available():
        return "mps"
    return None


def detect_family(settings: Settings) -> AcceleratorFamily:
    """``settings.family`` unless it is ``"auto"``; then what ONNX Runtime's providers imply, then torch's
    devices (only if torch is installed), else ``"cpu"``."""
    if settings.family != "auto":
        return settings.family
    import onnxruntime

    family = family_from_providers(onnxruntime.get_available_providers()) or _family_from_torch() or "cpu"
    logger.info("accelerator family: %s (detected)", family)
    return family
