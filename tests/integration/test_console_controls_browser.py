"""The console's controls in a real headless Chromium against a real API server and worker (one browser, one API
and one worker for the module; tiny clips, the passthrough processor):

* a job no live worker can take says why on its page, and is paused and resumed with the page's buttons;
* a rendering job is paused now (its running chunk, held at a gate, stopped and queued again, the attempt not
  counted), then resumed and rendered;
* one preview shows its stills and is approved (the rest renders), another is rejected (cancelled);
* an admin pauses and resumes the farm and releases a quarantined worker from the workers page; the worker then
  renders again.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select, update

from shared.db import session_scope
from shared.models import Chunk, WorkerPresence, utcnow
from shared.settings import Settings
from tests.support.browser import chromium
from tests.support.farm import Farm, wait_for
from tests.support.gates import Gate, gated_encoder
from tests.support.live import LiveApi, live_api
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key

pytestmark = [pytest.mark.integration, pytest.mark.shared_farm]

WAIT = 30_000  # ms: a click, its redirect and the page's reload, on a busy machine
RENDER = 300_000  # ms: a guard against hanging, not a speed assertion
PASSTHROUGH = {"processors": ["passthrough"], "encoder": {"preset": "ultrafast"}, "chunk_frames": 8}


@dataclass(frozen=True)
class Console:
    api: LiveApi
    farm: Farm
    browser: Browser
    gate: Gate  # holds the encode of chunk 1 of the job it is armed for
    worker: str  # the worker's name
    clip: Path  # 16 frames of 64x64: two chunks of 8


@pytest.fixture(scope="module")
def console(module_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    folder = tmp_path_factory.mktemp("console")
    logs = folder / "logs"
    logs.mkdir()
    gate = gated_encoder(folder / "gate", chunk_index=1, job_only=True)
    clip = make_clip(folder / "tiny.mp4", seconds=1, size="64x64", rate="16")
    farm = Farm(module_settings, logs)
    try:
        with live_api(module_settings, logs) as api, chromium() as browser:
            worker = farm.worker("w1", env=gate.env)
            yield Console(api, farm, browser, gate, worker, clip)
    finally:
        farm.stop()


def _submit(console: Console, key: str, options: dict[str, object]) -> str:
    files = {"target": (console.clip.name, console.clip.read_bytes(), "video/mp4")}
    response = httpx.post(
        f"{console.api.url}/v1/jobs", files=files, data={"options": json.dumps(options)}, headers=bearer(key),
        timeout=60,
    )  # fmt: skip
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _signed_in(console: Console, key: str) -> Page:
    page = console.browser.new_context().new_page()
    url = console.api.url
    page.goto(f"{url}/ui/jobs")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{url}/ui/jobs")
    return page


def test_the_console_says_why_a_job_waits_and_pauses_and_resumes_it(console: Console, settings: Settings) -> None:
    key = make_key(settings)
    tagged = _submit(console, key, {**PASSTHROUGH, "required_tags": ["studio-nowhere"]})
    page = _signed_in(console, key)
    page.goto(f"{console.api.url}/ui/jobs/{tagged}")
    live = page.locator("#live")
    expect(page.locator("#wait-reason")).to_contain_text("no_worker_with_tags", timeout=WAIT)
    expect(page.locator("#wait-reason")).to_contain_text("no live worker has every tag this job requires")
    page.get_by_role("button", name="Pause the job").click()
    expect(live).to_have_attribute("data-status", "paused", timeout=WAIT)
    page.get_by_role("button", name="Resume the job").click()
    expect(live).to_have_attribute("data-status", re.compile(r"^(waiting|queued|planning|rendering)$"), timeout=WAIT)
    page.get_by_role("button", name="Cancel the job").click()
    expect(live).to_have_attribute("data-status", "cancelled", timeout=WAIT)


def test_the_console_pauses_a_rendering_job_now_and_resumes_it(console: Console, settings: Settings) -> None:
    key = make_key(settings)
    job_id = _submit(console, key, {**PASSTHROUGH, "start_paused": True})
    console.gate.arm(job_id)
    logged = len(console.farm.log("w1"))
    page = _signed_in(console, key)
    page.goto(f"{console.api.url}/ui/jobs/{job_id}")
    live = page.locator("#live")
    page.get_by_role("button", name="Resume the job").click()
    wait_for(console.gate.reached.exists, timeout=RENDER / 1000, what="chunk 1 to wait at the gate")
    expect(live).to_have_attribute("data-status", "rendering", timeout=WAIT)
    page.get_by_role("button", name="Pause now").click()
    expect(live).to_have_attribute("data-status", "paused", timeout=WAIT)
    with session_scope(settings.database_url) as s:
        chunks = s.execute(select(Chunk.status, Chunk.attempts).where(Chunk.job_id == job_id).order_by(Chunk.index))
        assert [tuple(c) for c in chunks] == [("done", 1), ("queued", 0)], "stopped, the attempt not counted"
    stopped = lambda: "lease lost" in console.farm.log("w1")[logged:]  # noqa: E731
    wait_for(stopped, timeout=30, what="the worker to stop the chunk")
    console.gate.open()
    page.get_by_role("button", name="Resume the job").click()
    expect(live).to_have_attribute("data-status", "succeeded", timeout=RENDER)


def test_the_console_approves_one_preview_and_rejects_another(console: Console, settings: Settings) -> None:
    key = make_key(settings)
    approved, rejected = (_submit(console, key, {**PASSTHROUGH, "preview": 3}) for _ in range(2))
    page = _signed_in(console, key)
    live = page.locator("#live")

    page.goto(f"{console.api.url}/ui/jobs/{rejected}")
    expect(live).to_have_attribute("data-status", "awaiting_approval", timeout=RENDER)
    page.get_by_role("button", name="Reject the preview").click()
    expect(live).to_have_attribute("data-status", "cancelled", timeout=WAIT)
    expect(page.get_by_role("button", name="Approve the preview")).to_have_count(0)

    page.goto(f"{console.api.url}/ui/jobs/{approved}")
    expect(live).to_have_attribute("data-status", "awaiting_approval", timeout=RENDER)
    expect(page.get_by_role("heading", name="Preview: before and after")).to_be_visible(timeout=WAIT)
    expect(page.get_by_role("img", name=re.compile(r"of the output \(after\)"))).to_have_count(3)
    page.get_by_role("button", name="Approve the preview").click()
    expect(live).to_have_attribute("data-status", "succeeded", timeout=RENDER)
    kinds = [e["kind"] for e in httpx.get(
        f"{console.api.url}/v1/jobs/{approved}/events", headers=bearer(key), timeout=30
    ).json()["events"]]  # fmt: skip
    assert "awaiting_approval" in kinds and "approved" in kinds, kinds


def test_an_admin_pauses_and_resumes_the_farm_and_releases_a_worker_from_the_console(
    console: Console, settings: Settings
) -> None:
    admin = make_key(settings, admin=True)
    url = console.api.url

    def farm_paused() -> bool:
        return bool(httpx.get(f"{url}/v1/farm", headers=bearer(admin), timeout=30).json()["paused"])

    page = _signed_in(console, admin)
    page.goto(f"{url}/ui/workers")
    state = page.locator("#farm-state")
    expect(state).to_have_text("running", timeout=WAIT)
    try:
        page.get_by_role("button", name="Pause the farm").click()
        expect(state).to_have_text("paused", timeout=WAIT)
        assert farm_paused()
        page.get_by_role("button", name="Resume the farm").click()
        expect(state).to_have_text("running", timeout=WAIT)
        assert not farm_paused()
    finally:  # a farm left paused would hold every later test's work
        httpx.post(f"{url}/v1/farm/resume", headers=bearer(admin), timeout=30)

    with session_scope(settings.database_url) as s:  # as shared.worker_health quarantines a failing worker
        s.execute(
            update(WorkerPresence)
            .where(WorkerPresence.name == console.worker)
            .values(quarantined_at=utcnow(), quarantine_reason="failed chunks of 2 jobs within 3600s")
        )
    job_id = _submit(console, make_key(settings), PASSTHROUGH)  # waits: its only worker takes no work
    page.reload()
    row = page.locator(f'tr[data-worker="{console.worker}"]')
    expect(row.locator("[data-quarantine]")).to_be_visible(timeout=WAIT)
    row.get_by_role("button", name=f"Release {console.worker}").click()
    expect(page).to_have_url(f"{url}/ui/workers", timeout=WAIT)
    expect(row.locator("[data-quarantine]")).to_have_count(0, timeout=WAIT)

    def ended() -> str | None:
        status = str(httpx.get(f"{url}/v1/jobs/{job_id}", headers=bearer(admin), timeout=30).json()["status"])
        return status if status in {"succeeded", "failed", "cancelled"} else None

    assert wait_for(ended, timeout=RENDER / 1000, what="the released worker to render the job") == "succeeded"
