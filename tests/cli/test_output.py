"""CLI output that narrow terminals and scripts can use: identifiers whole at 80 columns and in a pipe, ``--json``."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from shared.db import session_scope
from shared.settings import Settings
from shared.tenants import create_key
from tests.support.farm import settings_env
from workers.models.registry import REGISTRY


def _swapfarm(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``swapfarm`` with its stdout a pipe (as in ``swapfarm … | cat``) in an 80-column environment."""
    done = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env={**(env or {}), "COLUMNS": "80", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def _whole(word: str, text: str) -> bool:
    return re.search(rf"(^|\s){re.escape(word)}(\s|$)", text, re.MULTILINE) is not None


def test_models_list_in_a_pipe_at_80_columns_shows_every_name_whole() -> None:
    listed = _swapfarm("models", "list")
    for name in REGISTRY:
        assert _whole(name, listed), f"{name} is cut or missing:\n{listed}"
    assert max(len(line) for line in listed.splitlines()) <= 80, "long text wraps below its model"
    assert "non-commercial" in listed, "the licences are there too"
    models = json.loads(_swapfarm("models", "list", "--json"))
    assert [m["name"] for m in models] == list(REGISTRY)
    assert all(len(m["sha256"]) == 64 for m in models if m["sha256"])


def test_key_ids_and_tenants_are_whole_at_80_columns_and_as_json(settings: Settings) -> None:
    with session_scope(settings.database_url) as session:
        info = create_key(session, "a-tenant-with-a-rather-long-name-for-a-narrow-terminal", name="x" * 90).info
    env = settings_env(settings)
    listed = _swapfarm("keys", "list", env=env)
    assert _whole(info.id, listed) and _whole(info.prefix, listed)
    keys = {k["id"]: k for k in json.loads(_swapfarm("keys", "list", "--json", env=env))}
    assert keys[info.id]["prefix"] == info.prefix and keys[info.id]["name"] == "x" * 90
    tenants = json.loads(_swapfarm("tenants", "list", "--json", env=env))
    assert info.tenant in {t["name"] for t in tenants}
    assert _whole(info.tenant, _swapfarm("tenants", "list", env=env))


def test_doctor_reports_as_json() -> None:
    report = json.loads(_swapfarm("doctor", "--json"))
    assert report["sections"]["family"]["in use"] in {"cpu", "cuda", "rocm", "mps", "openvino"}
    assert isinstance(report["warnings"], list) and isinstance(report["errors"], list)
