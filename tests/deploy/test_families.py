"""The family table (shared/families.py) is the one place a family is described: every family has a spec, and what
derives from it at run time (providers, detection, engine defaults, torch device) or must repeat it in a static
file (pyproject.toml's extras, the Dockerfiles, compose.yaml) agrees with it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from shared.families import CPU_PROVIDER, FAMILIES, GPU_FAMILIES
from shared.options import AcceleratorFamily, choices
from shared.settings import Settings
from shared.tasks import render_queue, render_queues
from tests.deploy.deployfiles import DOCKER, compose, dockerfiles, env_instructions, environment, extras
from tests.deploy.test_compose import REQUIRED
from workers.engines.choosing import compile_mode
from workers.engines.family import family_from_providers, refused_render_queues
from workers.engines.onnx import PROVIDER_ORDER, choose_providers

IMAGES = dockerfiles()


def _installs(extra: str, package: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether pyproject's ``extra`` installs ``package``, directly or through the extras it includes."""
    for dependency in extras()[extra]:
        name = re.split(r"[\[<>=!~; ]", dependency)[0]
        if name == package:
            return True
        included = re.fullmatch(r"swapfarm\[([^\]]+)\]", dependency)
        if included and any(
            _installs(inner, package, seen | {extra}) for inner in included.group(1).split(",") if inner not in seen
        ):
            return True
    return False


def _run(image: str) -> str:
    return " ".join(i.arguments for i in IMAGES[image] if i.keyword == "RUN")


def test_every_family_has_one_spec_under_its_own_name() -> None:
    assert set(FAMILIES) == set(choices(AcceleratorFamily))
    for name, spec in FAMILIES.items():
        assert spec.name == name
        assert spec.providers[-1] == CPU_PROVIDER, f"{name}: the CPU provider is the last resort"
        assert (spec.memory == "device") == spec.gpu, f"{name}: a discrete GPU's batches fit its own memory"
    assert GPU_FAMILIES == {"cuda", "rocm"}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_worker_derives_providers_detection_and_engine_defaults_from_the_spec(name: AcceleratorFamily) -> None:
    spec = FAMILIES[name]
    assert PROVIDER_ORDER[name] == spec.providers
    assert choose_providers(name, spec.providers) == spec.providers
    for provider in spec.accelerated_providers:
        assert family_from_providers([provider, CPU_PROVIDER]) == name, provider
    refused, _ = refused_render_queues(name, [CPU_PROVIDER])
    assert refused == (set(render_queues(name)) if spec.gpu else set())
    settings = Settings(environment="test", torch_compile_mode="auto")
    assert compile_mode(settings, name) == ("max-autotune" if spec.gpu else "default")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_familys_extra_installs_its_onnx_runtime_and_its_image_installs_the_extra(name: str) -> None:
    spec = FAMILIES[name]
    assert _installs(spec.extra, spec.onnxruntime), f"extra {spec.extra!r} lacks {spec.onnxruntime}"
    if spec.gpu:
        assert _installs(spec.extra, "torch"), f"{name}: GPU families run the compiled torch engine"
    pins = (DOCKER / "constraints.txt").read_text().splitlines()
    if spec.image is None:
        return
    assert any(line.startswith(f"{spec.onnxruntime}==") for line in pins), f"{spec.onnxruntime} unpinned"
    run = _run(spec.image)
    assert f"--no-editable {spec.extra}" in run or f"extras={spec.extra};" in run, f"{spec.image} lacks {spec.extra}"
    sharing = [other.name for other in FAMILIES.values() if other.image == spec.image]
    image_family = env_instructions(IMAGES[spec.image]).get("SWAPFARM_FAMILY")
    assert image_family == (name if len(sharing) == 1 else None), "an image of several families detects its own"


def _renders(service: dict[str, Any]) -> bool:
    """A worker service that takes render work (the stitcher, beat and flower share the CPU image)."""
    argv = service.get("command") or []
    if argv[:2] != ["swapfarm", "worker"]:
        return False
    return "--queues" not in argv or any(q.startswith("render.") for q in argv[argv.index("--queues") + 1].split(","))


def test_every_worker_image_is_a_familys_image() -> None:
    workers = {name for name in IMAGES if name.startswith("worker-")}
    assert workers == {spec.image for spec in FAMILIES.values() if spec.image is not None}


def test_compose_runs_a_worker_of_each_family_that_has_a_service_and_no_other() -> None:
    services: dict[str, dict[str, Any]] = compose(REQUIRED)["services"]
    workers = {name for name, s in services.items() if _renders(s)}
    assert workers == {spec.compose_service for spec in FAMILIES.values() if spec.compose_service is not None}
    for spec in FAMILIES.values():
        if spec.compose_service is None:
            continue
        service = services[spec.compose_service]
        assert spec.image is not None and service["image"].startswith(f"swapfarm/{spec.image}:")
        assert service["build"]["dockerfile"] == f"docker/{spec.image}.Dockerfile"
        family = environment(service).get("SWAPFARM_FAMILY") or env_instructions(IMAGES[spec.image]).get(
            "SWAPFARM_FAMILY", "auto"
        )
        assert family in {spec.name, "auto"}, spec.compose_service
        argv = service["command"]
        if "--queues" in argv:
            assert render_queue(spec.name) in argv[argv.index("--queues") + 1].split(",")
        if spec.gpu:
            assert service["profiles"] == [spec.name], "a GPU worker starts only with its family's profile"
