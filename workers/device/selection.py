"""Whether a worker's frames take the device path: a module without torch, so that a worker without it imports
the render step all the same."""

from __future__ import annotations

from typing import cast

from shared.families import AcceleratorFamily
from shared.settings import Settings
from workers.engines.loading import EngineChoice, choose_engine

__all__ = ["FALLBACK", "frame_path_device", "frame_path_engine"]

FALLBACK = "device_path_fallback"
"""The degradation code of a chunk the device path cannot run (it renders on the OpenCV path)."""


def frame_path_engine(settings: Settings, family: str) -> EngineChoice:
    """The engine ``settings.engine`` resolves to on a worker of ``family`` (per-model overrides aside), and why:
    torch takes the frames through the device path, ONNX Runtime through the OpenCV path."""
    return choose_engine(settings.model_copy(update={"model_engines": {}}), cast(AcceleratorFamily, family), "")


def frame_path_device(settings: Settings, family: str) -> str | None:
    """The torch device the frames go through on a worker of ``family``, or ``None`` for the OpenCV path.

    The frame path follows ``settings.engine`` as :func:`~workers.engines.loading.choose_engine` resolves it for
    this machine (``auto``: torch on CUDA/ROCm and on CPUs with native bf16); per-model overrides
    (``settings.model_engines``) choose the models' engines only.
    """
    if frame_path_engine(settings, family).engine != "torch":
        return None
    from workers.engines.torch_engine import device_for  # torch is imported only where the path runs

    return device_for(family)
