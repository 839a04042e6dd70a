"""Accelerator families: one :class:`FamilySpec` per family, in :data:`FAMILIES`, from which the rest derives.

The worker's provider order and family detection (``workers/engines/onnx.py``, ``workers/engines/family.py``), the
engine defaults (``workers/engines/loading.py``), the torch device and its memory probe
(``workers/engines/torch_engine.py``, ``workers/engines/memory.py``), the doctor's checks (``workers/doctor.py``),
the device-memory metric (``workers/metrics.py``) and the option choices (``shared/options.py``) read this table.
Static files that must name a family (``pyproject.toml``'s extras, the Dockerfiles, ``compose.yaml``) are checked
against it by ``tests/deploy/test_families.py``.

Adding a family: a :data:`AcceleratorFamily` value and its spec here, its extra in ``pyproject.toml``, its image
(a Dockerfile or a build argument of one) and its ``compose.yaml`` service where it has one.

It is plain data: ``shared/`` may not import ``workers/``, and the API (which reads the choices) never imports
torch or onnxruntime.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

AcceleratorFamily = Literal["cuda", "rocm", "mps", "openvino", "cpu"]

CPU_PROVIDER = "CPUExecutionProvider"


@dataclass(frozen=True)
class FamilySpec:
    """What a worker of one accelerator family runs on and how it is installed.

    Attributes:
        name: the family (``SWAPFARM_FAMILY``; its render queue is ``render.<name>``).
        providers: the ONNX Runtime execution providers to try, best first; the CPU provider last. The ones before
            it imply the family when ONNX Runtime offers them (detection tries families in table order).
        gpu: a discrete GPU: the torch engine compiles with ``max-autotune`` and larger batch buckets by default,
            and a worker whose ONNX Runtime lacks the family's accelerated providers refuses render work (it would
            render on the CPU, silently slower); the doctor warns when torch sees no GPU.
        torch_device: the torch device the family's models run on (CUDA and ROCm both appear as ``cuda``).
        memory: the memory probe batches are fitted to: ``device`` (torch's allocator on the GPU) or ``host``
            (a RAM budget; unified-memory and CPU families).
        torch_build: the key of torch's ``version.py`` (``cuda``, ``hip``) a torch build for the family sets;
            ``None`` where any torch build serves.
        device_nodes: a glob under ``/dev`` whose match, with a matching torch build, implies the family.
        onnxruntime: the ONNX Runtime distribution (PyPI name) that has the family's providers.
        extra: the ``pyproject.toml`` extra that installs it (with the rest of a worker).
        image: the worker image (``docker/<image>.Dockerfile``) that installs the extra; ``None``: no image (a
            native worker: containers on macOS cannot reach Metal).
        compose_service: the ``compose.yaml`` service running the image; ``None``: none on the one-host farm.
    """

    name: AcceleratorFamily
    providers: tuple[str, ...]
    gpu: bool
    torch_device: Literal["cuda", "mps", "cpu"]
    memory: Literal["device", "host"]
    torch_build: Literal["cuda", "hip"] | None
    device_nodes: str | None
    onnxruntime: str
    extra: str
    image: str | None
    compose_service: str | None

    @property
    def accelerated_providers(self) -> tuple[str, ...]:
        """The providers that run models off the CPU (all but the CPU provider)."""
        return tuple(provider for provider in self.providers if provider != CPU_PROVIDER)


FAMILIES: Mapping[AcceleratorFamily, FamilySpec] = {
    spec.name: spec
    for spec in (
        FamilySpec(
            name="cuda",
            providers=("TensorrtExecutionProvider", "CUDAExecutionProvider", CPU_PROVIDER),
            gpu=True,
            torch_device="cuda",
            memory="device",
            torch_build="cuda",
            device_nodes="nvidia[0-9]*",
            onnxruntime="onnxruntime-gpu",
            extra="cuda",
            image="worker-cuda",
            compose_service="worker-cuda",
        ),
        FamilySpec(
            name="rocm",
            providers=("MIGraphXExecutionProvider", "ROCMExecutionProvider", CPU_PROVIDER),
            gpu=True,
            torch_device="cuda",
            memory="device",
            torch_build="hip",
            device_nodes="kfd",
            onnxruntime="onnxruntime-migraphx",
            extra="rocm",
            image="worker-rocm",
            compose_service="worker-rocm",
        ),
        FamilySpec(
            name="openvino",
            providers=("OpenVINOExecutionProvider", CPU_PROVIDER),
            gpu=False,
            torch_device="cpu",
            memory="host",
            torch_build=None,
            device_nodes=None,
            onnxruntime="onnxruntime-openvino",
            extra="openvino",
            image="worker-cpu",  # built with ORT_BUILD=openvino (linux/amd64)
            compose_service=None,
        ),
        FamilySpec(
            name="mps",
            providers=("CoreMLExecutionProvider", CPU_PROVIDER),
            gpu=False,
            torch_device="mps",
            memory="host",  # unified memory: the host's RAM budget
            torch_build=None,
            device_nodes=None,
            onnxruntime="onnxruntime",  # the macOS wheel has the CoreML provider
            extra="worker",
            image=None,
            compose_service=None,
        ),
        FamilySpec(
            name="cpu",
            providers=(CPU_PROVIDER,),
            gpu=False,
            torch_device="cpu",
            memory="host",
            torch_build=None,
            device_nodes=None,
            onnxruntime="onnxruntime",
            extra="worker",
            image="worker-cpu",
            compose_service="worker-cpu",
        ),
    )
}
"""Every accelerator family's spec, by name; detection prefers earlier entries."""

GPU_FAMILIES: frozenset[AcceleratorFamily] = frozenset(name for name, spec in FAMILIES.items() if spec.gpu)
"""Families with a discrete GPU (see :attr:`FamilySpec.gpu`)."""
