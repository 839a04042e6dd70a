"""Reading the deployment files the way their tools do: compose.yaml with Compose's variable interpolation, and
Dockerfiles as instructions (continuations joined, comments dropped)."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
DOCKER = ROOT / "docker"
ENV_EXAMPLE = ROOT / ".env.example"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"

# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}, and $$ for a literal $.
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


class MissingVariable(KeyError):
    """A ``${VAR:?…}`` whose variable is unset or empty: compose refuses to start."""


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Substitute variables in one value as Compose does."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg") or ""
        current = env.get(name)
        unset = current is None or (op is not None and op.startswith(":") and current == "")
        if op in (":?", "?") and unset:
            raise MissingVariable(name)
        if op in (":-", "-") and unset:
            return arg
        return current or ""

    return _VARIABLE.sub(substitute, value)


def variables(value: Any) -> set[str]:
    """Every variable a compose document refers to."""
    if isinstance(value, str):
        return {m.group("name") for m in _VARIABLE.finditer(value) if m.group("name")}
    if isinstance(value, Mapping):
        return set().union(*(variables(v) for v in value.values())) if value else set()
    if isinstance(value, list):
        return set().union(*(variables(v) for v in value)) if value else set()
    return set()


def _resolve(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, Mapping):
        return {key: _resolve(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, env) for item in value]
    return value


def raw_compose() -> dict[str, Any]:
    """compose.yaml parsed (YAML anchors and merge keys resolved), variables not yet substituted."""
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return document


def compose(env: Mapping[str, str]) -> dict[str, Any]:
    """compose.yaml as Compose sees it with ``env`` (values interpolated, extension fields kept)."""
    resolved: dict[str, Any] = _resolve(raw_compose(), env)
    return resolved


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as a mapping (Compose accepts a list of KEY=VALUE too)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def project_version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def extras() -> dict[str, list[str]]:
    found: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return found


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    comments: tuple[str, ...]  # the comment lines right above it


def dockerfile(path: Path) -> list[Instruction]:
    """The instructions of a Dockerfile, each on one line, with the comments just above it."""
    instructions: list[Instruction] = []
    comments: list[str] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if not pending:
                comments.append(stripped.lstrip("#").strip())
            continue
        if not stripped and not pending:
            comments = []
            continue
        pending += (" " if pending else "") + stripped.removesuffix("\\").strip()
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = pending.partition(" ")
        instructions.append(Instruction(keyword.upper(), arguments.strip(), tuple(comments)))
        pending, comments = "", []
    return instructions


def dockerfiles() -> dict[str, list[Instruction]]:
    """``{image name: instructions}`` for docker/<name>.Dockerfile."""
    return {path.name.removesuffix(".Dockerfile"): dockerfile(path) for path in sorted(DOCKER.glob("*.Dockerfile"))}


def env_instructions(instructions: list[Instruction]) -> dict[str, str]:
    """The variables of the ENV instructions (``KEY=VALUE`` pairs)."""
    env: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "ENV":
            for pair in instruction.arguments.split():
                key, _, value = pair.partition("=")
                env[key] = value
    return env
