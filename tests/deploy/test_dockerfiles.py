"""The images' Dockerfiles keep the deployment rules: pinned bases and packages, a non-root user, a healthcheck,
the caches as volumes, and the project installed by scripts/setup as CI installs it. (hadolint lints them in
scripts/check; these are the rules it does not know.)"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from shared.families import FAMILIES
from tests.deploy.deployfiles import DOCKER, Instruction, dockerfiles, env_instructions, extras

IMAGES = dockerfiles()
WORKERS = sorted(name for name in IMAGES if name.startswith("worker-"))
# A tag that names a release: digits, not a moving pointer such as `latest`, `3`, `3.11` or `12-runtime`.
_RELEASE_TAG = re.compile(r"^(RELEASE\.)?v?\d+\.\d+(\.\d+)?([-._].*)?$")


def _all(name: str, keyword: str) -> list[Instruction]:
    return [i for i in IMAGES[name] if i.keyword == keyword]


def _run(name: str) -> str:
    return " ".join(i.arguments for i in _all(name, "RUN"))


def _setup_extra(name: str) -> str:
    match = re.search(r"scripts/setup --venv \S+ --no-editable (\S+)", _run(name))
    assert match
    return match.group(1).strip('"').replace("${extras}", "worker")


def test_the_images_are_the_api_and_one_worker_per_accelerator_family() -> None:
    assert set(IMAGES) == {"api"} | {spec.image for spec in FAMILIES.values() if spec.image is not None}
    assert {"worker-cpu", "worker-cuda", "worker-rocm"} <= set(IMAGES)


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_base_images_are_pinned_releases(name: str) -> None:
    for instruction in _all(name, "FROM"):
        image = instruction.arguments.split()[0]
        repository, _, tag = image.partition(":")
        assert tag, f"{image}: no tag"
        assert "latest" not in tag
        assert _RELEASE_TAG.match(tag), f"{image}: {tag!r} does not name a release"


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_final_user_is_not_root(name: str) -> None:
    user = _all(name, "USER")[-1].arguments
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {user}: numeric and non-root (runAsNonRoot can check it)"
    last_from = max(i for i, ins in enumerate(IMAGES[name]) if ins.keyword == "FROM")
    last_user = max(i for i, ins in enumerate(IMAGES[name]) if ins.keyword == "USER")
    assert last_user > last_from


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_a_healthcheck_probes_the_process(name: str) -> None:
    (check,) = _all(name, "HEALTHCHECK")
    assert " CMD " in f" {check.arguments} " and "NONE" not in check.arguments
    probe = "/healthz" if name == "api" else "/metrics"
    assert probe in check.arguments


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_the_project_is_installed_by_scripts_setup_with_constrained_versions(name: str) -> None:
    run = _run(name)
    match = re.search(r"scripts/setup --venv (\S+) --no-editable (\S+)", run)
    assert match, "installs with scripts/setup, the command CI runs"
    env = env_instructions(IMAGES[name])
    assert env["PATH"].startswith(f"{match.group(1)}/bin:")
    assert env["PIP_CONSTRAINT"].endswith("/docker/constraints.txt")
    installed = re.findall(r"extras=(\w+)", run) or [match.group(2).strip('"')]
    assert set(installed) <= set(extras()), f"unknown extras {installed}"
    assert "pip install" not in run.replace("scripts/setup", ""), "no package outside scripts/setup"


def test_the_api_image_has_no_worker_code_or_heavy_runtime() -> None:
    assert re.search(r"--no-editable api$", _run("api"))
    copied = {i.arguments.split()[0] for i in _all("api", "COPY")}
    assert "workers" not in copied
    api_deps = " ".join(extras()["api"])
    for heavy in ("torch", "onnxruntime", "opencv", "numpy"):
        assert heavy not in api_deps


def test_each_worker_image_installs_its_familys_runtime() -> None:
    families = {spec.image: (spec.extra, spec.onnxruntime) for spec in FAMILIES.values() if spec.gpu and spec.image}
    assert {"worker-cuda": ("cuda", "onnxruntime-gpu"), "worker-rocm": ("rocm", "onnxruntime-migraphx")}.items() <= (
        families.items()
    )
    for name, (extra, runtime) in families.items():
        assert f"--no-editable {extra}" in _run(name)
        assert any(dep.startswith(runtime) for dep in extras()[extra])
        assert any(dep.startswith("swapfarm[") and "torch" in dep for dep in extras()[extra]), "torch engine"
        assert env_instructions(IMAGES[name])["SWAPFARM_FAMILY"] == extra
    cpu = _run("worker-cpu")
    assert "extras=worker" in cpu and "extras=openvino" in cpu and "TARGETARCH" in cpu
    assert any(dep.startswith("onnxruntime-openvino") for dep in extras()["openvino"])


def _requirements(extra: str) -> set[str]:
    """The distributions ``swapfarm[extra]`` installs by name, its own extras expanded (``swapfarm[a,b]``)."""
    found: set[str] = set()
    for dep in extras()[extra]:
        if dep.startswith("swapfarm["):
            for inner in dep.removeprefix("swapfarm[").rstrip("]").split(","):
                found |= _requirements(inner)
        else:
            found.add(re.split(r"[<>=!~\[ ;]", dep, maxsplit=1)[0])
    return found


def test_the_openvino_build_is_pinned_alone_with_the_images_constraint() -> None:
    """onnxruntime-openvino replaces onnxruntime (both are the ``onnxruntime`` package): its extra installs it
    without onnxruntime, at the version the images' constraints pin, and the CPU image installs that extra instead
    of ``worker``, never both."""
    (pin,) = [dep for dep in extras()["openvino"] if dep.startswith("onnxruntime-openvino")]
    assert re.fullmatch(r"onnxruntime-openvino==\d+\.\d+\.\d+", pin)
    assert pin in (DOCKER / "constraints.txt").read_text().splitlines()
    wheels = _requirements("openvino")
    assert "onnxruntime-openvino" in wheels and not wheels & {"onnxruntime", "onnxruntime-gpu", "onnxruntime-migraphx"}
    assert re.search(r"extras=worker;.*if \[ \"\$\{ORT_BUILD\}\" = openvino \].*extras=openvino;", _run("worker-cpu"))


@pytest.mark.parametrize("name", WORKERS)
def test_model_and_compile_caches_are_volumes_owned_by_the_user(name: str) -> None:
    (volume,) = _all(name, "VOLUME")
    declared = set(re.findall(r'"([^"]+)"', volume.arguments))
    assert declared == {"/var/cache/swapfarm/models", "/var/cache/swapfarm/compile"}
    env = env_instructions(IMAGES[name])
    assert env["SWAPFARM_MODEL_CACHE_DIR"] == "/var/cache/swapfarm/models"
    if "torch" in " ".join(extras()[_setup_extra(name)]):  # images with the compiled torch engine
        keys = ["SWAPFARM_TORCH_COMPILE_CACHE_DIR"] + ([] if name == "worker-cpu" else ["TRITON_CACHE_DIR"])
        for key in keys:  # Inductor writes C++ on the CPU, Triton kernels on GPUs
            assert env[key].startswith("/var/cache/swapfarm/compile/"), key
    run = _run(name)
    assert re.search(r"install -d -o swapfarm -g swapfarm [^&]*/var/cache/swapfarm/models", run)
    assert re.search(r"install -d -o swapfarm -g swapfarm [^&]*/var/cache/swapfarm/compile", run)


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_apt_packages_are_pinned_unless_said_why(name: str) -> None:
    for instruction in _all(name, "RUN"):
        for install in re.findall(r"apt-get install ([^&;]*)", instruction.arguments):
            packages = [w for w in install.split() if not w.startswith("-")]
            unpinned = [p for p in packages if "=" not in p]
            if unpinned:
                assert any("hadolint ignore=DL3008" in c for c in instruction.comments), unpinned
                assert len(instruction.comments) > 1, "the reason is written next to the ignore"


def test_constraints_pin_exact_versions_of_everything_the_images_install() -> None:
    lines = [line for line in (DOCKER / "constraints.txt").read_text().splitlines() if not line.startswith("#")]
    pins = dict(line.split("==") for line in lines)
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name) for name in pins), "canonical names, name==version"
    for runtime in {spec.onnxruntime for spec in FAMILIES.values() if spec.image is not None}:
        assert runtime in pins
    for dependency in extras()["api"] + extras()["worker-base"]:
        name = re.split(r"[\[<>=!~; ]", dependency)[0].lower()
        assert name in pins, f"{name} is not pinned for the images"


def test_the_api_images_commands_run_without_worker_code_or_heavy_runtimes() -> None:
    """What the api image runs (`swapfarm api`, `db upgrade`, `keys`) imports nothing it lacks."""
    blocked = ["workers", "numpy", "onnxruntime", "onnx", "cv2", "torch", "flower"]
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "from typer.testing import CliRunner\n"
        "from cli.main import app\n"
        "import api.app\n"
        "for args in (['api', '--help'], ['db', 'upgrade', '--help'], ['keys', '--help']):\n"
        "    result = CliRunner().invoke(app, args)\n"
        "    assert result.exit_code == 0, (args, result.output)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=DOCKER.parent, timeout=120)


@pytest.mark.parametrize("name", ["worker-cuda", "worker-rocm"])
def test_gpu_images_pin_a_maintained_ffmpeg_of_at_least_6(name: str) -> None:
    args = dict(a.arguments.split("=", 1) for a in _all(name, "ARG") if "=" in a.arguments)
    version = args["FFMPEG_VERSION"]  # epoch:upstream-revision, e.g. 7:6.1.1-3ubuntu5
    major = int(version.split(":")[-1].split(".")[0])
    assert major >= 6, f"{name}: ffmpeg {version}"
    assert '"ffmpeg=${FFMPEG_VERSION}"' in _run(name)
