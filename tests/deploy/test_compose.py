"""compose.yaml: valid against the Compose Specification's JSON schema, and consistent with the code it runs —
images built from docker/, commands the CLI accepts in the image that has them, environments the settings model
reads (and accepts in production), healthchecks and start order."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import typer.main
from jsonschema import Draft202012Validator

from cli.main import app as cli_app
from shared.broker import make_celery, queue_names
from shared.settings import Settings
from shared.tasks import STITCH_QUEUE, fixed_queues, render_queue, worker_queues
from tests.deploy.deployfiles import (
    DOCKER,
    SCHEMA,
    MissingVariable,
    compose,
    dockerfiles,
    env_example,
    env_instructions,
    environment,
    project_version,
    raw_compose,
    variables,
)

# What an operator must put in .env: compose refuses to start without each.
REQUIRED = {
    "POSTGRES_PASSWORD": "pg-4f0c2d",
    "WORKER_POSTGRES_PASSWORD": "pgw-7c1e09",
    "API_POSTGRES_PASSWORD": "pga-3b8d51",
    "REDIS_PASSWORD": "redis-9a1b7e",
    "SWAPFARM_SECRET_KEY": "a-real-secret-0123456789",
    "SWAPFARM_FLOWER_PASSWORD": "flower-5e2d",
}
ONE_SHOT = {"migrate", "minio-init"}
# The services that log in to Postgres as the schema's owner, as the API's role; every other one, the workers' role.
OWNER_SERVICES = {"migrate"}
API_SERVICES = {"api"}
# Images without the worker extra can run only these subcommands.
API_IMAGE_COMMANDS = {"api", "db"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return compose(REQUIRED)


@pytest.fixture(scope="module")
def services(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = document["services"]
    return found


def _farm_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The services that run our images (the rest are postgres, redis, minio)."""
    return {name: s for name, s in services.items() if str(s.get("image", "")).startswith("swapfarm/")}


def test_compose_file_is_valid_against_the_compose_specification(document: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def test_the_farm_does_not_start_without_its_secrets() -> None:
    for name in REQUIRED:
        with pytest.raises(MissingVariable, match=name):
            compose({k: v for k, v in REQUIRED.items() if k != name})
        with pytest.raises(MissingVariable, match=name):
            compose({**REQUIRED, name: ""})
    assert set(REQUIRED) <= set(env_example()), ".env.example lists every required secret"


def test_every_swapfarm_variable_in_compose_and_the_images_is_a_settings_field(
    services: dict[str, dict[str, Any]],
) -> None:
    fields = set(Settings.model_fields)
    names = {key for s in services.values() for key in environment(s)}
    names |= variables(raw_compose()) | set(env_example())
    names |= {key for instructions in dockerfiles().values() for key in env_instructions(instructions)}
    swapfarm = {n for n in names if n.startswith("SWAPFARM_")}
    assert swapfarm, "compose passes settings as SWAPFARM_ variables"
    unknown = sorted(n for n in swapfarm if n.removeprefix("SWAPFARM_").lower() not in fields)
    assert not unknown, f"not fields of shared.settings.Settings: {unknown}"


def test_each_service_environment_builds_production_settings_and_default_secrets_are_refused(
    services: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def settings_of(env: dict[str, str]) -> Settings:
        for key in [k for k in os.environ if k.startswith("SWAPFARM_")]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return Settings()

    images = dockerfiles()
    for name, service in _farm_services(services).items():
        if name == "flower":
            continue  # below: it gets the broker and its login only
        image = _image_name(service)
        env = {**env_instructions(images[image]), **environment(service)}
        settings = settings_of(env)
        assert settings.environment == "production", name
        login = "swapfarm" if name in OWNER_SERVICES else "swapfarm_api" if name in API_SERVICES else "swapfarm_worker"
        assert settings.database_url.startswith(f"postgresql+psycopg://{login}:"), name
        assert settings.broker_url.startswith("redis://"), name
        assert settings.storage_url == "file:///var/lib/swapfarm/storage", name
        assert settings.s3_secret is None and settings.s3_key is None, f"{name}: empty S3 variables mean unset"
        if "SWAPFARM_FAMILY" in env:
            assert settings.family == env["SWAPFARM_FAMILY"], name
        with pytest.raises(ValueError, match="SWAPFARM_SECRET_KEY"):
            settings_of({**env, "SWAPFARM_SECRET_KEY": "change-me"})
    flower = settings_of(environment(services["flower"]))
    assert flower.flower_password is not None and flower.broker_url.startswith("redis://")
    with pytest.raises(ValueError, match="SWAPFARM_S3_SECRET"):
        settings_of({**environment(services["api"]), "SWAPFARM_S3_SECRET": "minioadmin"})


def test_flower_gets_the_broker_and_its_login_and_no_other_secret(services: dict[str, dict[str, Any]]) -> None:
    env = environment(services["flower"])
    assert set(env) == {"SWAPFARM_BROKER_URL", "SWAPFARM_FLOWER_USER", "SWAPFARM_FLOWER_PASSWORD"}
    assert all(REQUIRED[name] not in "".join(env.values()) for name in ("POSTGRES_PASSWORD", "SWAPFARM_SECRET_KEY"))


def test_workers_reach_postgres_with_a_role_of_their_own_that_migrate_grants(
    services: dict[str, dict[str, Any]],
) -> None:
    postgres = services["postgres"]
    assert environment(postgres)["WORKER_POSTGRES_PASSWORD"] == REQUIRED["WORKER_POSTGRES_PASSWORD"]
    init = next(v.split(":")[0] for v in postgres["volumes"] if "docker-entrypoint-initdb.d" in v)
    script = (DOCKER.parent / init).resolve() / "10-worker-role.sh"
    assert "CREATE ROLE swapfarm_worker LOGIN" in script.read_text()
    assert services["migrate"]["command"][-4:] == ["--worker-role", "swapfarm_worker", "--api-role", "swapfarm_api"]
    assert "CREATE ROLE swapfarm_api LOGIN" in (script.parent / "20-api-role.sh").read_text()
    for name, service in _farm_services(services).items():
        url = environment(service).get("SWAPFARM_DATABASE_URL", "")
        if name in OWNER_SERVICES:
            assert url.startswith("postgresql+psycopg://swapfarm:"), name
        elif name in API_SERVICES:
            assert url.startswith("postgresql+psycopg://swapfarm_api:"), name
            assert REQUIRED["POSTGRES_PASSWORD"] not in url, f"{name} must not hold the owner's password"
        elif name != "flower":
            assert url.startswith("postgresql+psycopg://swapfarm_worker:"), name
            assert REQUIRED["POSTGRES_PASSWORD"] not in url, f"{name} must not hold the owner's password"


def _image_name(service: dict[str, Any]) -> str:
    return str(service["image"]).removeprefix("swapfarm/").split(":")[0]


def test_every_image_is_built_from_its_dockerfile_at_the_project_version(
    services: dict[str, dict[str, Any]],
) -> None:
    images = dockerfiles()
    for name, service in _farm_services(services).items():
        image = _image_name(service)
        assert image in images, f"{name}: no docker/{image}.Dockerfile"
        assert str(service["image"]).endswith(f":{project_version()}"), f"{name}: tag is not the project version"
        build = service["build"]
        assert build["context"] == "."
        assert (DOCKER.parent / build["dockerfile"]) == DOCKER / f"{image}.Dockerfile", name


def _cli_command(args: list[str]) -> tuple[Any, list[str]]:
    """The ``swapfarm`` (sub)command that ``args`` name, and the arguments left for it (typer vendors click, so
    the commands are walked through their ``commands`` mappings)."""
    command: Any = typer.main.get_command(cli_app)
    rest = list(args)
    while hasattr(command, "commands") and rest and not rest[0].startswith("-"):
        assert rest[0] in command.commands, f"swapfarm has no command {rest[0]!r}"
        command, rest = command.commands[rest[0]], rest[1:]
    return command, rest


def test_every_command_is_one_the_cli_accepts_in_the_image_that_has_it(
    services: dict[str, dict[str, Any]],
) -> None:
    declared = set(queue_names(make_celery(Settings())))
    for name, service in _farm_services(services).items():
        argv = service["command"]
        assert isinstance(argv, list), f"{name}: exec form, no shell"
        assert argv[0] == "swapfarm", name
        command, rest = _cli_command(argv[1:])
        command.make_context(" ".join(argv[:2]), list(rest))  # raises on an unknown option or a bad value
        if _image_name(service) == "api":
            assert argv[1] in API_IMAGE_COMMANDS, f"{name}: the api image has no worker extra for {argv[1]!r}"
        if "--queues" in argv:
            queues = argv[argv.index("--queues") + 1].split(",")
            assert set(queues) <= declared, f"{name}: unknown queues {set(queues) - declared}"
            family = environment(service).get("SWAPFARM_FAMILY")
            if family:
                assert render_queue(family) in queues, f"{name}: a {family} worker must consume its family's queue"
    assert services["stitcher"]["command"][services["stitcher"]["command"].index("--queues") + 1] == STITCH_QUEUE


def test_every_queue_of_the_task_table_has_a_worker_service_consuming_it(services: dict[str, dict[str, Any]]) -> None:
    # compose.yaml names queues in its commands (a YAML file cannot import them): a task table that gained a queue
    # no service consumes would leave its messages waiting forever.
    consumed: set[str] = set()
    for service in _farm_services(services).values():
        argv = service["command"]
        if argv[:2] == ["swapfarm", "worker"]:
            family = environment(service).get("SWAPFARM_FAMILY", "cpu")
            consumed |= set(
                argv[argv.index("--queues") + 1].split(",") if "--queues" in argv else worker_queues(family)
            )
    assert set(fixed_queues()) <= consumed, f"no service consumes {set(fixed_queues()) - consumed}"
    assert render_queue("any") in consumed


def test_long_running_services_have_healthchecks_and_start_in_order(services: dict[str, dict[str, Any]]) -> None:
    disabled = {name for name, s in services.items() if s.get("healthcheck", {}).get("disable")}
    assert disabled == ONE_SHOT | {"beat"}, "only one-shots and beat (no port to probe) go without a healthcheck"
    for name, service in services.items():
        if name not in disabled:
            assert service["healthcheck"]["test"], name
    for name in ONE_SHOT:
        assert services[name]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["migrate"]["command"][:3] == ["swapfarm", "db", "upgrade"]
    for name, service in _farm_services(services).items():
        if name in {"migrate", "flower"}:
            continue
        depends = service["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["redis"] == {"condition": "service_healthy"}, name
        assert depends["minio-init"]["required"] is False, f"{name}: MinIO only with the s3 profile"
    assert services["flower"]["depends_on"] == {"redis": {"condition": "service_healthy"}}


def test_worker_healthchecks_probe_the_metrics_port_the_worker_serves(services: dict[str, dict[str, Any]]) -> None:
    for name, service in _farm_services(services).items():
        if service["command"][1] != "worker":
            continue
        port = environment(service)["SWAPFARM_WORKER_METRICS_PORT"]
        assert f"127.0.0.1:{port}/metrics" in " ".join(service["healthcheck"]["test"]), name


def test_gpu_workers_sit_behind_profiles_with_their_devices(services: dict[str, dict[str, Any]]) -> None:
    cuda, rocm = services["worker-cuda"], services["worker-rocm"]
    assert cuda["profiles"] == ["cuda"] and rocm["profiles"] == ["rocm"]
    (device,) = cuda["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and {"gpu", "video"} <= set(device["capabilities"])
    assert {d.split(":")[0] for d in rocm["devices"]} == {"/dev/kfd", "/dev/dri"}
    assert services["minio"]["profiles"] == ["s3"] and services["minio-init"]["profiles"] == ["s3"]
    defaults = [name for name, s in services.items() if "profiles" not in s]
    assert set(defaults) == {"postgres", "redis", "migrate", "api", "worker-cpu", "stitcher", "beat", "flower"}


def test_redis_keeps_its_queues_across_a_restart_unless_told_not_to(services: dict[str, dict[str, Any]]) -> None:
    redis = services["redis"]
    argv = redis["command"]
    assert argv[argv.index("--appendonly") + 1] == "yes", "append-only persistence by default"
    assert argv[argv.index("--appendfsync") + 1] == "everysec"
    assert any(volume.endswith(":/data") for volume in redis["volumes"]), "the append-only file lives on a volume"
    plain = compose({**REQUIRED, "REDIS_APPENDONLY": "no"})["services"]["redis"]["command"]
    assert plain[plain.index("--appendonly") + 1] == "no"
    assert env_example()["REDIS_APPENDONLY"] == "yes"


def test_the_reaper_reaches_the_storage_whose_expired_files_it_deletes(services: dict[str, dict[str, Any]]) -> None:
    storage = environment(services["beat"])["SWAPFARM_STORAGE_URL"].removeprefix("file://")
    assert any(volume.endswith(f":{storage}") for volume in services["beat"]["volumes"])
