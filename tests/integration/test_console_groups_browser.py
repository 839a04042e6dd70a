"""The console's group controls in a real headless Chromium against a real API server and worker: a group
submitted paused is resumed and paused again from the groups list, resumed from its own page, paused now while a
member's chunk renders (held at a gate), resumed and rendered by the worker; another is cancelled with its button."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from shared.settings import Settings
from tests.support.browser import chromium
from tests.support.farm import Farm, wait_for
from tests.support.gates import gated_encoder
from tests.support.live import LiveApi, live_api
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key

pytestmark = pytest.mark.integration

WAIT = 30_000  # ms: a click, its redirect and the page's reload, on a busy machine
PAUSED = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}, "start_paused": True}


@pytest.fixture
def server(settings: Settings, tmp_path: Path) -> Iterator[tuple[LiveApi, Farm]]:
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(settings, logs)
    try:
        with live_api(settings, logs) as api:
            yield api, farm
    finally:
        farm.stop()


def _group(url: str, key: str, clips: list[Path], name: str) -> dict[str, Any]:
    files = [("target", (c.name, c.read_bytes(), "video/mp4")) for c in clips]
    response = httpx.post(
        f"{url}/v1/groups", files=files, data={"options": json.dumps(PAUSED), "name": name}, headers=bearer(key),
        timeout=60,
    )  # fmt: skip
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def _sign_in(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/ui/groups")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{url}/ui/groups")


def test_the_console_pauses_resumes_and_cancels_a_group(
    server: tuple[LiveApi, Farm], settings: Settings, tmp_path: Path
) -> None:
    api, farm = server
    key = make_key(settings)
    clips = [make_clip(tmp_path / f"take-{i}.mp4", seconds=0.5, size="64x64", rate="16") for i in range(2)]
    made = _group(api.url, key, clips, "takes")
    takes, first = made["id"], made["job_ids"][0]
    spare = _group(api.url, key, clips[:1], "spare")["id"]
    gate = gated_encoder(tmp_path / "gate", chunk_index=0, job_only=True)  # 8 frames: one chunk
    waiting = re.compile(r"^\d (waiting|queued)(, \d (waiting|queued))?$")

    with chromium() as browser:
        page = browser.new_context().new_page()
        _sign_in(page, api.url, key)
        row = page.locator(f'tr[data-group="{takes}"]')
        members = row.locator("td").nth(2)
        expect(members).to_have_text("2 paused", timeout=WAIT)
        expect(row.get_by_role("button", name="Pause the group")).to_have_count(0)
        row.get_by_role("button", name="Resume the group").click()
        expect(page).to_have_url(f"{api.url}/ui/groups", timeout=WAIT)
        expect(members).to_have_text(waiting, timeout=WAIT)
        row.get_by_role("button", name="Pause the group").click()
        expect(members).to_have_text("2 paused", timeout=WAIT)

        page.goto(f"{api.url}/ui/groups/{takes}")
        page.get_by_role("button", name="Resume the group").click()
        expect(page).to_have_url(f"{api.url}/ui/groups/{takes}", timeout=WAIT)
        expect(page.get_by_role("button", name="Pause the group")).to_be_visible(timeout=WAIT)
        gate.arm(first)
        farm.worker("w1", env=gate.env)

        def group() -> dict[str, Any]:
            body: dict[str, Any] = httpx.get(f"{api.url}/v1/groups/{takes}", headers=bearer(key), timeout=30).json()
            return body

        wait_for(gate.reached.exists, timeout=300, what="the first member's chunk to wait at the gate")
        page.reload()
        page.get_by_role("button", name=re.compile("^Pause the group now")).click()
        expect(page).to_have_url(f"{api.url}/ui/groups/{takes}", timeout=WAIT)
        expect(page.get_by_role("button", name=re.compile("^Resume the group"))).to_be_visible(timeout=WAIT)
        assert group()["jobs"] == {"paused": 2}
        wait_for(lambda: "lease lost" in farm.log("w1"), timeout=30, what="the worker to stop the chunk")
        gate.open()
        page.get_by_role("button", name=re.compile("^Resume the group")).click()
        expect(page).to_have_url(f"{api.url}/ui/groups/{takes}", timeout=WAIT)

        def ended() -> dict[str, Any] | None:
            body = group()
            return body if body["status"] != "active" else None

        assert wait_for(ended, timeout=300, what="the group to end")["jobs"] == {"succeeded": 2}
        page.reload()
        expect(page.locator("p .state")).to_have_text("succeeded", timeout=WAIT)
        expect(page.get_by_role("button", name=re.compile("the group"))).to_have_count(0)

        page.goto(f"{api.url}/ui/groups")
        page.locator(f'tr[data-group="{spare}"]').get_by_role("button", name="Cancel the group").click()
        expect(page.locator(f'tr[data-group="{spare}"] .state')).to_have_text("cancelled", timeout=WAIT)
