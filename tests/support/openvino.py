"""A virtual environment with ONNX Runtime's OpenVINO build, for the processes that run the ``openvino`` family.

``onnxruntime-openvino`` replaces ``onnxruntime`` (both install the ``onnxruntime`` package), so it never sits in
the test suite's own venv: :func:`openvino_venv` builds ``.venv-openvino`` beside it with the command the worker
image runs (``scripts/setup --venv .venv-openvino openvino``: the project, editable, with the ``openvino`` extra),
once — later calls find it current (``scripts/setup``'s stamp, newer than ``pyproject.toml``) and install nothing.
The folder is ignored by git.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-openvino"
EXTRA = "openvino"
PYPI = "https://pypi.org/simple/onnxruntime-openvino/"


class Unreachable(Exception):
    """The venv is not built and PyPI, where ``onnxruntime-openvino`` comes from, cannot be reached."""


def current(venv: Path = VENV) -> bool:
    """Whether ``venv`` holds the ``openvino`` install of the current ``pyproject.toml``."""
    stamp = venv / f".installed-{EXTRA}"
    return stamp.exists() and stamp.stat().st_mtime >= (ROOT / "pyproject.toml").stat().st_mtime


def pypi_reachable(timeout: float = 10) -> bool:
    """Whether PyPI answers for ``onnxruntime-openvino`` (one request to its simple index page)."""
    import httpx

    try:
        return httpx.head(PYPI, timeout=timeout, follow_redirects=True).status_code < 500
    except httpx.HTTPError:
        return False


def openvino_venv(venv: Path = VENV) -> tuple[Path, float | None]:
    """The Python of ``venv`` with the project and ``onnxruntime-openvino``, and the seconds spent building it
    (``None``: it was current).

    Raises:
        Unreachable: it has to be built and PyPI cannot be reached.
        RuntimeError: the install failed (the end of its output is in the message).
    """
    python = venv / "bin" / "python"
    if current(venv):
        return python, None
    if not pypi_reachable():
        raise Unreachable(f"{PYPI} cannot be reached, and {venv.name} is not built")
    started = time.monotonic()
    setup = subprocess.run(
        [str(ROOT / "scripts" / "setup"), "--venv", str(venv), EXTRA],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))},
        capture_output=True,
        text=True,
    )
    if setup.returncode != 0:
        raise RuntimeError(f"scripts/setup --venv {venv.name} {EXTRA} failed:\n{setup.stderr[-4000:]}")
    return python, time.monotonic() - started
