"""``swapfarm farm pause|resume|status`` against a real API server: an admin pauses and resumes the whole farm;
a tenant's key is refused and changes nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from shared.settings import Settings
from tests.support.farm import settings_env
from tests.support.live import live_api
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration


def test_an_admin_pauses_and_resumes_the_farm_from_the_cli(settings: Settings, tmp_path: Path) -> None:
    admin, tenant = make_key(settings, admin=True), make_key(settings)
    with live_api(settings, tmp_path) as server:
        env = {**settings_env(settings), "SWAPFARM_API_URL": server.url, "SWAPFARM_API_KEY": admin}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "cli", "farm", *args], env=env, capture_output=True, text=True, timeout=120
            )

        def paused() -> bool:
            return bool(httpx.get(f"{server.url}/v1/farm", headers=bearer(admin), timeout=30).json()["paused"])

        try:
            done = cli("pause")
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith("farm paused") and paused()
            assert cli("status").stdout.startswith("farm paused")
            refused = cli("resume", "--key", tenant)
            assert refused.returncode == 1 and "forbidden" in refused.stderr and paused()
            done = cli("resume")
            assert done.returncode == 0 and done.stdout.strip() == "farm running" and not paused()
        finally:
            httpx.post(f"{server.url}/v1/farm/resume", headers=bearer(admin), timeout=30)
