"""Print docker/constraints.txt: exact versions for the container images.

The dependency closure of ``swapfarm[api,worker]`` as installed in the running environment (run it with the
venv that passed ``scripts/test``), plus the pip tooling and the accelerator runtimes only the images install
(pinned below, bumped by hand with their base images). Usage::

    .venv/bin/python docker/constraints.py > docker/constraints.txt
"""

from __future__ import annotations

import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = ("swapfarm", frozenset({"api", "worker-base", "worker"}))
TOOLS = ("pip", "setuptools", "wheel")
# Accelerator runtimes of the worker images (docker/worker-*.Dockerfile), not installed by the test suite:
# onnxruntime-gpu for CUDA 12 + cuDNN 9, the MIGraphX build for ROCm, OpenVINO's build for Intel (amd64).
IMAGE_RUNTIMES = {
    "onnxruntime-gpu": "1.22.0",
    "onnxruntime-migraphx": "1.23.0",
    "onnxruntime-openvino": "1.24.1",
}
HEADER = """\
# Exact versions for the container images (PIP_CONSTRAINT in docker/*.Dockerfile): the dependency closure of
# swapfarm[api,worker] at the versions the test suite ran against, plus the accelerator runtimes only the images
# install. Constraints pin what gets installed and install nothing themselves. Generated; after a dependency
# change, from a venv that passed scripts/test:  .venv/bin/python docker/constraints.py > docker/constraints.txt"""


def closure(name: str, extras: frozenset[str]) -> dict[str, str]:
    """``{canonical name: installed version}`` of every distribution ``name[extras]`` needs, transitively."""
    found: dict[str, tuple[str, frozenset[str]]] = {}
    stack = [(name, extras)]
    while stack:
        current, wanted = stack.pop()
        key = canonicalize_name(current)
        try:
            dist = metadata.distribution(current)
        except metadata.PackageNotFoundError:  # an optional dependency for another platform
            continue
        seen = found.get(key)
        if seen is not None and wanted <= seen[1]:
            continue
        found[key] = (dist.version, (seen[1] if seen else frozenset()) | wanted)
        for raw in dist.requires or []:
            requirement = Requirement(raw)
            if requirement.marker is None or any(
                requirement.marker.evaluate({"extra": extra}) for extra in (*wanted, "")
            ):
                stack.append((requirement.name, frozenset(requirement.extras)))
    found.pop(canonicalize_name(name), None)
    return {key: version for key, (version, _) in found.items()}


def main() -> None:
    pins = closure(*ROOT)
    pins.update({tool: metadata.version(tool) for tool in TOOLS if _installed(tool)})
    pins.update(IMAGE_RUNTIMES)
    lines = [HEADER, *(f"{name}=={version}" for name, version in sorted(pins.items()))]
    sys.stdout.write("\n".join(lines) + "\n")


def _installed(name: str) -> bool:
    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


if __name__ == "__main__":
    main()
