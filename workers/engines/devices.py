"""The torch device each accelerator family runs on (:attr:`shared.families.FamilySpec.torch_device`).

Import this module only where torch may be imported.
"""

from __future__ import annotations

import torch

from shared.errors import ModelError
from shared.families import FAMILIES
from workers import degradations

__all__ = ["device_for"]


def device_for(family: str) -> str:
    """The torch device of an accelerator family (:attr:`shared.families.FamilySpec.torch_device`): CUDA and ROCm
    both appear as ``cuda``; MPS as ``mps`` (the CPU, reported as ``mps_unavailable``, when torch cannot use it);
    everything else (cpu, openvino) runs torch on the CPU.

    Raises:
        ModelError: the family's device is not usable by this torch build.
    """
    spec = next((spec for spec in FAMILIES.values() if spec.name == family), None)
    wanted = spec.torch_device if spec is not None else "cpu"
    if wanted == "cuda":
        if not torch.cuda.is_available():
            raise ModelError(f"the worker's family is {family} but torch sees no GPU (torch {torch.__version__})")
        return "cuda"
    if wanted == "mps":
        if torch.backends.mps.is_available():
            return "mps"
        degradations.report(
            "mps_unavailable",
            f"the worker's family is mps but torch {torch.__version__} has no usable MPS device; "
            "its models run on the CPU (much slower)",
            sticky=True,
        )
        return "cpu"
    return "cpu"
