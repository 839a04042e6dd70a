"""Which frame back-end a worker's frames take, and whether they travel as 4:2:0 planes: one decision, made here,
which ``swapfarm doctor`` shows and each chunk's ``chunk_done`` event of the job records. A module without torch,
so that a worker without it imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from shared.families import AcceleratorFamily
from shared.settings import Settings
from workers.engines.choosing import EngineChoice, choose_engine

if TYPE_CHECKING:
    from workers.frames.backend import FrameBackend

__all__ = [
    "FALLBACK",
    "BackendChoice",
    "backend_for",
    "frame_backend",
    "frame_path_device",
    "frame_path_engine",
    "make_backend",
]

FALLBACK = "device_path_fallback"
"""The degradation code of a chunk whose frames cannot travel as planes on the torch device's back-end (they render
as whole BGR frames on the host back-end)."""


def frame_path_engine(settings: Settings, family: str) -> EngineChoice:
    """The engine ``settings.engine`` resolves to on a worker of ``family`` (per-model overrides aside), and why:
    torch takes the frames as planes to the torch device, ONNX Runtime leaves them whole BGR frames on the host."""
    return choose_engine(settings.model_copy(update={"model_engines": {}}), cast(AcceleratorFamily, family), "")


def frame_path_device(settings: Settings, family: str) -> str | None:
    """The torch device the frames go to (as 4:2:0 planes) on a worker of ``family``, or ``None``: whole BGR
    frames on the host.

    The frames follow ``settings.engine`` as :func:`~workers.engines.loading.choose_engine` resolves it for this
    machine (``auto``: torch on CUDA/ROCm and on CPUs with native bf16); per-model overrides
    (``settings.model_engines``) choose the models' engines only.
    """
    if frame_path_engine(settings, family).engine != "torch":
        return None
    from workers.engines.devices import device_for  # torch is imported only where the frames go to it

    return device_for(family)


@dataclass(frozen=True)
class BackendChoice:
    """A frame back-end: ``host`` (numpy/OpenCV) or ``torch`` on ``device``, and why."""

    name: str
    device: str
    reason: str

    def __str__(self) -> str:
        return f"the {self.name} back-end on {self.device} ({self.reason})"


def backend_for(device: str | None) -> BackendChoice:
    """The back-end of frames on the torch ``device`` of the frame path (``None``: the host's frames).

    Where the device is the CPU, the host's memory is the device's and OpenCV's kernels are the faster ones: the
    host back-end works on the tensors' memory as numpy arrays. Only an accelerator's frames take torch's.
    """
    if device is None:
        return BackendChoice("host", "cpu", "the models run on ONNX Runtime")
    if device == "cpu":
        return BackendChoice("host", "cpu", "torch on the CPU, whose memory is the host's")
    return BackendChoice("torch", device, f"the frames stay on {device} with the models")


def frame_backend(settings: Settings, family: str) -> BackendChoice:
    """The frame back-end of a worker of ``family`` under ``settings``: the frames follow the engine setting as it
    resolves for this machine (:func:`frame_path_device`)."""
    return backend_for(frame_path_device(settings, family))


def make_backend(choice: BackendChoice) -> FrameBackend[object]:
    """The back-end ``choice`` names (torch is imported only for torch's)."""
    if choice.name == "torch":
        from workers.frames.torch import TorchBackend

        return TorchBackend(choice.device)  # type: ignore[return-value]
    from workers.frames.host import HostBackend

    return HostBackend()  # type: ignore[return-value]
