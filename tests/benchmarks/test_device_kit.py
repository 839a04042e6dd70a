"""The device kit (``benchmarks/device_kit.sh``) is complete for the lent GPU machine, as far as this machine can
tell: its wheels install into an empty ``--target`` with no index and no dependencies, and the modules the device
run starts import from that target and the lent image's own packages alone (``benchmarks/device_image.txt``), in a
fresh virtual environment with no site packages; its ffmpeg and ffprobe run a real in-process job; the call the kit
writes runs device_run.sh there (the device and doctor steps pass, each GPU step says in one line why it cannot run
without a GPU); the kit fits the carry limit with the working tree and its call the command limit.

Where this machine stands in for that one: the kit is downloaded for this Python (3.11) with the same pins as for
the machine's 3.12 (only the binary wheels differ: pydantic-core, SQLAlchemy, kornia-rs, psycopg-binary), and the
image's packages are this machine's versions of them (torch 2.13 on the CPU where the machine has 2.11 with CUDA).
The kit is downloaded by the kit's own script each run (from pip's cache after the first), so the test checks what
the script makes rather than a copy of it; it needs PyPI, as CI has, and without it fails with pip's error rather
than skipping: a kit nobody checked is not known to be complete.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path, PurePath

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "benchmarks" / "device_kit.sh"
IMAGE = ROOT / "benchmarks" / "device_image.txt"
CARRY_LIMIT = 64 * 2**20
COMMAND_LIMIT = 2000
# What benchmarks/device_run.sh starts: the doctor (cli), the gpu-marked tests, gpu_check.py, device_pipeline.py,
# processors.py, and the in-process run's engines and frame back-ends they reach.
ENTRY_MODULES = [
    "cli.main",
    "workers.doctor",
    "workers.local",
    "workers.engines.torch_engine",
    "workers.frames.torch",
    "workers.faces.device_detection",
    "benchmarks.gpu_check",
    "benchmarks.device_pipeline",
    "benchmarks.processors",
    "tests.conftest",
]


@dataclass(frozen=True)
class Kit:
    folder: Path
    printed: str
    call: dict[str, object]


@dataclass(frozen=True)
class Device:
    """A stand-in for the lent machine: a fresh venv whose only site packages are the image's (a .pth file names
    them), the kit installed into ``site`` and ``tools`` as the call installs it, and the environment the call
    gives device_run.sh there."""

    python: Path
    env: dict[str, str]
    roots: list[Path]
    tools: Path
    kit: Kit


def _kit(folder: Path, python_version: str, data: Path) -> Kit:
    done = subprocess.run(
        ["bash", str(KIT), "--python-version", python_version, "--dest", str(folder / "whl"),
         "--data-dest", str(folder / "data"), "--data", str(data)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return Kit(folder, done.stdout, json.loads((folder / "whl" / "run.json").read_text()))


def gpu_test_files() -> list[str]:
    """The test modules with gpu-marked tests, found as device_run.sh finds them."""
    marked = re.compile(r"^\s*@?pytest\.mark\.gpu\b", re.MULTILINE)
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py") if marked.search(p.read_text()))


def _image_site(folder: Path) -> Path:
    """A folder of links to this machine's installs of the lent image's packages, and of nothing else."""
    wanted = {_normal(line) for line in IMAGE.read_text().splitlines() if line.strip() and not line.startswith("#")}
    folder.mkdir()
    for dist in importlib.metadata.distributions():
        if _normal(dist.metadata["Name"]) not in wanted:
            continue
        for top in {PurePath(str(f)).parts[0] for f in dist.files or []}:
            source = Path(str(dist.locate_file(top)))
            if top not in ("..", "__pycache__") and source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return folder


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Kit:
    return _kit(tmp_path_factory.mktemp("kit312"), "3.12", data_dir)


@pytest.fixture(scope="module")
def device(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Device:
    here = tmp_path_factory.mktemp("device")
    made = _kit(here, f"{sys.version_info.major}.{sys.version_info.minor}", data_dir)
    site, tools = here / "site", here / "tools"
    install = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-deps",
               "--no-compile"]  # fmt: skip
    wheels = sorted(str(p) for p in (made.folder / "whl").glob("*.whl"))
    subprocess.run([*install, "--target", str(site), *wheels], check=True, capture_output=True, timeout=120)
    # the tool wheel is the machine's 3.12 one whatever this Python is: its binaries are what is checked
    tool_wheels = [str(p) for p in (made.folder / "whl" / "tools").glob("*.whl")]
    subprocess.run([*install, "--ignore-requires-python", "--target", str(tools), *tool_wheels], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    image = _image_site(here / "image")
    venv.create(here / "venv", with_pip=False)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    (here / "venv" / "lib" / version / "site-packages" / "image.pth").write_text(f"{image}\n")
    env = {
        "PATH": f"{tools / 'ffmpeg' / 'install' / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(here / "home"),
        "PYTHONPATH": f"{site}:{ROOT}",
        "SWAPFARM_TEST_DATA": str(data_dir),
    }
    python = here / "venv" / "bin" / "python"
    return Device(python, env, [site, image, ROOT], tools / "ffmpeg" / "install" / "bin", made)


def test_the_kit_fits_the_carry_limit_and_its_call_the_command_limit(kit: Kit) -> None:
    pins = [line.split("#")[0].strip() for line in (ROOT / "benchmarks" / "device_kit.txt").read_text().splitlines()]
    pins = [pin for pin in pins if pin]
    wheels = sorted((kit.folder / "whl").rglob("*.whl"))
    assert len(wheels) == len(pins), "one wheel per pin, no second version of any"
    for wheel in wheels:
        tags = wheel.name.removesuffix(".whl").split("-")[-3:]
        assert tags[0] in ("cp312", "py3") and tags[1] in ("cp312", "abi3", "none"), wheel.name
        assert tags[2] == "any" or "x86_64" in tags[2], wheel.name
    files = [p for folder in ("whl", "data") for p in (kit.folder / folder).rglob("*") if p.is_file()]
    carried = sum(p.stat().st_size for p in files)
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode().split("\0")  # fmt: skip
    tree = sum((ROOT / name).stat().st_size for name in tracked if name and (ROOT / name).is_file())
    assert tree + carried < CARRY_LIMIT, f"{(tree + carried) / 2**20:.1f} MiB would travel"
    assert "of the 64.0 MiB a call carries" in kit.printed
    command = str(kit.call["command"])
    assert len(command) <= COMMAND_LIMIT
    assert command.startswith("python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ")
    assert "PATH=/tmp/tools/ffmpeg/install/bin:$PATH" in command and "PYTHONPATH=/tmp/site:$PWD" in command
    assert command.endswith(f"bash benchmarks/device_run.sh {kit.folder / 'data'}")
    assert kit.call["carry"] == [str(kit.folder / "whl"), str(kit.folder / "data")]
    assert {p.relative_to(kit.folder / "data").as_posix() for p in (kit.folder / "data").rglob("*.*")} >= {
        "media/crowd_1080p.mp4", "models/yunet_2023mar.onnx", "media/s0.jpg", "media/d18.mp4", "media/group6.jpg",
    }  # fmt: skip


def test_the_kits_ffmpeg_and_ffprobe_run_and_encode_h264(device: Device) -> None:
    for tool in ("ffmpeg", "ffprobe"):
        done = subprocess.run([str(device.tools / tool), "-version"], capture_output=True, text=True, env=device.env)
        assert done.returncode == 0 and done.stdout.startswith(f"{tool} version"), done.stderr
    encoders = subprocess.run([str(device.tools / "ffmpeg"), "-hide_banner", "-encoders"], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    assert " libx264 " in encoders and " aac " in encoders


@pytest.mark.slow
def test_the_runs_modules_import_from_the_kit_and_the_images_packages_alone(device: Device) -> None:
    modules = [*ENTRY_MODULES, *(f.removesuffix(".py").replace("/", ".") for f in gpu_test_files())]
    probe = (
        "import importlib, json, sys, sysconfig\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "files = {getattr(m, '__file__', None) or '' for m in list(sys.modules.values())}\n"
        "files = {f for f in files if f.startswith('/')}  # torch's ops and classes are named '_ops.py' alone\n"
        "print(json.dumps({'files': sorted(files), 'stdlib': [sysconfig.get_paths()[k] for k in ('stdlib', "
        "'platstdlib')]}))\n"
    )
    done = subprocess.run([str(device.python), "-c", probe], capture_output=True, text=True, env=device.env,
                          cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    roots = [*map(str, device.roots), *found["stdlib"]]
    outside = [f for f in found["files"] if not any(f.startswith(root) for root in roots)]
    assert not outside, f"imported from neither the kit nor the image's packages: {outside[:5]}"
    assert any(f.startswith(str(device.roots[0])) for f in found["files"]), "the kit's packages were imported"


@pytest.mark.slow
def test_an_in_process_job_runs_there_on_the_kits_ffmpeg_and_the_torch_engine(device: Device, data_dir: Path) -> None:
    models = device.python.parents[2] / "models"
    models.mkdir(exist_ok=True)
    (models / "yunet_2023_mar.onnx").write_bytes((data_dir / "models" / "yunet_2023mar.onnx").read_bytes())
    env = {**device.env, "SWAPFARM_MODELS_DIR": str(models), "SWAPFARM_ALLOW_MODEL_HASH_MISMATCH": "true",
           "SWAPFARM_MODEL_BASE_URLS": "[]", "SWAPFARM_FAMILY": "cpu", "SWAPFARM_ENGINE": "torch",
           "SWAPFARM_TORCH_COMPILE_MODE": "eager", "SWAPFARM_WORK_DIR": str(models.parent / "work")}  # fmt: skip
    output = models.parent / "blurred.mp4"
    job = subprocess.run(
        [str(device.python), "-m", "cli", "run", "--target", str(data_dir / "media" / "d18.mp4"), "-o", str(output),
         "--processor", "face_blur", "--trim-end-frame", "6", "--state-dir", str(models.parent / "state")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
    )  # fmt: skip
    assert job.returncode == 0, job.stderr[-3000:]
    streams = subprocess.run(
        [str(device.tools / "ffprobe"), "-v", "error", "-count_packets", "-show_entries",
         "stream=codec_name,nb_read_packets", "-of", "csv=p=0", str(output)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert streams[0] == "h264,6" and streams[1].startswith("aac,"), streams


def test_the_gpu_marked_tests_are_collected_there(device: Device) -> None:
    files = gpu_test_files()
    assert "tests/workers/engines/test_gpu.py" in files
    done = subprocess.run(
        [str(device.python), "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "gpu", *files],
        capture_output=True, text=True, env=device.env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    collected = re.search(r"(\d+)/\d+ tests collected", done.stdout)
    assert collected and int(collected[1]) >= 5, done.stdout[-2000:]


@pytest.mark.slow
def test_the_kits_call_runs_device_run_there_and_each_gpu_step_says_in_one_line_why_it_did_not(
    device: Device, tmp_path: Path
) -> None:
    """The call as the kit wrote it (its fixed /tmp folders moved under this test's), with the stand-in's python as
    ``python3``: the wheels install, the device and doctor steps pass on the kit's ffmpeg, and here, with no GPU,
    each GPU step is one line, the others going on."""
    command = str(device.kit.call["command"]).replace("/tmp/site", str(tmp_path / "site"))
    command = command.replace("/tmp/tools", str(tmp_path / "tools"))
    env = {**device.env, "PATH": f"{device.python.parent}:/usr/local/bin:/usr/bin:/bin", "OUT": str(tmp_path / "out")}
    del env["PYTHONPATH"], env["SWAPFARM_TEST_DATA"]  # the call sets them
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert (tmp_path / "out" / "device_run.log").exists(), done.stderr[-3000:]
    log = (tmp_path / "out" / "device_run.log").read_text()
    assert done.stdout == log, "everything printed is in the log as it came"
    assert "ffmpeg version b08d796" in log and "no CUDA provider in ONNX Runtime" in log
    steps = [line.split("\t") for line in (tmp_path / "out" / "steps.tsv").read_text().splitlines()[1:]]
    assert [(title, state) for title, state, *_ in steps[:2]] == [("device", "ok"), ("swapfarm doctor", "ok")], log
    assert len(steps) == 8, log
    for title, state, *_ in steps[2:]:
        assert state.startswith("not run: no GPU"), (title, state)
        said = [line for line in log.splitlines() if line.startswith(f"=== {title}")]
        assert said == [f"=== {title}: {state}"], said
    assert done.returncode == 1, "a run that measured nothing on a GPU does not pass"
