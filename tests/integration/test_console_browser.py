"""The jobs console in a real headless Chromium against a real API server and worker: sign in, submit a
``face_blur`` job on d18.mp4 through the form (upload progress shown), watch it reach 100 % without reloading,
see the before/after stills, play and download the output; another tenant cannot see it; a form post without the
CSRF token is refused; sign-out ends the session. A screenshot of the job page is kept as a test artefact."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response, expect

from shared.settings import Settings
from tests.support.browser import chromium
from tests.support.farm import Farm
from tests.support.live import LiveApi, live_api
from tests.support.tenants import make_key

pytestmark = pytest.mark.integration

# Every control a person can operate has a name a screen reader says (label, aria-label or text).
UNNAMED_CONTROLS = """() => [...document.querySelectorAll(
  'input:not([type=hidden]), select, textarea, button, a[href], progress, video, img')]
  .filter(el => !((el.labels && el.labels.length) || el.getAttribute('aria-label') || el.getAttribute('alt')
                 || (el.textContent || '').trim() || el.closest('label')))
  .map(el => el.outerHTML.slice(0, 120))"""


@pytest.fixture
def console_settings(settings: Settings, data_dir: Path, tmp_path: Path) -> Settings:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    return settings.model_copy(
        update={
            "models_dir": models,
            "model_cache_dir": tmp_path / "model-cache",
            "allow_model_hash_mismatch": True,
            "model_base_urls": [],
            "family": "cpu",
            "lease_seconds": 30,
        }
    )


@pytest.fixture
def server(console_settings: Settings, tmp_path: Path) -> Iterator[tuple[LiveApi, Farm]]:
    logs = tmp_path / "logs"
    logs.mkdir()
    farm = Farm(console_settings, logs)
    try:
        farm.worker("w1")
        with live_api(console_settings, logs) as api:
            yield api, farm
    finally:
        farm.stop()


@pytest.fixture
def browser() -> Iterator[Browser]:
    with chromium() as browser:
        yield browser


def _sign_in(context: BrowserContext, url: str, key: str) -> Page:
    page = context.new_page()
    page.goto(f"{url}/ui/jobs")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{url}/ui/jobs")
    return page


def _frames(path: Path) -> int:
    out = subprocess.run(
        ["ffprobe", "-v", "error", "-count_packets", "-select_streams", "v:0", "-show_entries",
         "stream=nb_read_packets", "-of", "csv=p=0", str(path)],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return int(out.strip())


def test_a_job_through_the_console_in_a_browser(
    server: tuple[LiveApi, Farm], browser: Browser, console_settings: Settings, data_dir: Path, tmp_path: Path
) -> None:
    api, farm = server
    alice, bob = make_key(console_settings), make_key(console_settings)
    context = browser.new_context(accept_downloads=True)
    page = _sign_in(context, api.url, alice)
    assert alice not in page.content()
    readable = page.evaluate("() => document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    session = next(c for c in context.cookies() if c["name"] == "swapfarm_session")
    assert session["httpOnly"] and session["sameSite"] == "Strict"
    assert alice not in readable and session["value"] not in readable, "nothing secret where a script could read it"
    assert page.evaluate(UNNAMED_CONTROLS) == []

    # Submit through the form, the upload slowed down so that its progress shows.
    page.get_by_role("link", name="Submit a job").click()
    assert page.evaluate(UNNAMED_CONTROLS) == []
    page.get_by_label("Target video").set_input_files(data_dir / "media" / "d18.mp4")
    page.get_by_role("checkbox", name="face_swapper").uncheck()
    page.get_by_role("checkbox", name="face_blur").check()
    page.get_by_label("Quality").fill("90")
    page.get_by_text("More options").click()
    page.get_by_label("Chunk Frames").fill("72")
    # What the page proves needs no strict sweep (four detector runs a frame) nor a slower preset.
    page.get_by_label("Blur Strict").uncheck()
    page.locator("#opt-encoder-preset").select_option("ultrafast")
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 64 * 1024},
    )
    page.get_by_role("button", name="Submit the job").click()
    upload = page.get_by_role("progressbar", name="Upload progress")
    expect(upload).to_be_visible()
    page.wait_for_function("() => { const bar = document.getElementById('upload-progress'); "
                           "return bar.value > 0 && bar.value < 100; }")  # fmt: skip
    expect(page.get_by_text(re.compile(r"Uploading: \d+%"))).to_be_visible()
    expect(page).to_have_url(re.compile(r"/ui/jobs/[0-9a-f]{32}$"), timeout=60_000)
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    job_id = page.url.rsplit("/", 1)[1]
    # The output's responses, from the first: the browser may fetch the whole (small) video as soon as it appears.
    ranges: list[Response] = []
    page.on("response", lambda r: ranges.append(r) if f"/ui/jobs/{job_id}/output" in r.url else None)

    # Live: the bar reaches 100 % and the stills and the video appear, all without reloading the page.
    page.evaluate("() => { window.stillThisPage = true; }")
    expect(page.locator("#live")).to_have_attribute("data-status", "succeeded", timeout=300_000)
    expect(page.get_by_role("progressbar", name="Progress")).to_have_attribute("value", "100.0")
    assert page.evaluate("() => window.stillThisPage === true"), "the page was reloaded"
    befores = page.get_by_role("img", name=re.compile(r"of the input \(before\)"))
    afters = page.get_by_role("img", name=re.compile(r"of the output \(after\)"))
    expect(befores).to_have_count(3)
    expect(afters).to_have_count(3)
    for image in (*befores.all(), *afters.all()):
        expect(image).to_have_js_property("complete", True)
        assert image.evaluate("img => img.naturalWidth") == 480
    cells = page.get_by_role("list", name="Chunk map: one cell per chunk").get_by_role("listitem")
    expect(cells).to_have_count(3)
    assert re.fullmatch(
        r"Chunk 1: frames 72–143, done, worker w1@test, 1 attempt", cells.nth(1).get_attribute("title") or ""
    )

    # Play: the <video> streams with Range requests and its clock advances.
    played = page.locator("video#output").evaluate(
        """async v => { v.muted = true; await v.play();
             await new Promise(done => setTimeout(done, 1500)); v.pause(); return [v.currentTime, v.duration]; }"""
    )
    assert played[0] > 0.3 and abs(played[1] - 7.2) < 0.2, played
    assert any(r.status == 206 for r in ranges), [r.status for r in ranges]

    # Download.
    with page.expect_download() as download:
        page.get_by_role("link", name="Download the output").click()
    saved = tmp_path / "downloaded.mp4"
    download.value.save_as(saved)
    assert _frames(saved) == 216
    assert page.evaluate(UNNAMED_CONTROLS) == []
    screenshot = tmp_path / "job-page.png"
    page.screenshot(path=str(screenshot), full_page=True)
    print(f"screenshot of the job page: {screenshot}")  # noqa: T201 - the test's artefact, for people

    # A form post without the CSRF token (as another site's page would send) is refused.
    status = page.evaluate(
        f"""() => fetch('/ui/jobs/{job_id}/cancel', {{method: 'POST', redirect: 'manual',
             body: new URLSearchParams({{csrf_token: 'guessed'}})}}).then(r => r.status)"""
    )
    assert status == 403

    # The workers page: the worker, its family, seen just now, with its measured rate; to a tenant no node name,
    # host or device (admin keys only).
    page.get_by_role("link", name="Workers").click()
    row = page.locator("#worker-rows tr").filter(has_text="online")
    expect(row).to_contain_text("cpu")
    expect(row).to_contain_text("idle")
    assert float(row.get_by_role("cell").nth(4).inner_text()) > 0
    assert "w1@test" not in page.content()

    # Another tenant sees nothing of it.
    other = _sign_in(browser.new_context(), api.url, bob)
    assert job_id not in other.content()
    assert other.goto(f"{api.url}/ui/jobs/{job_id}").status == 404  # type: ignore[union-attr]

    # Signing out ends the session.
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{api.url}/ui/sign-in")
    page.goto(f"{api.url}/ui/jobs/{job_id}")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))

    # Without JavaScript the job page reads the same (server-rendered), stills included.
    plain = _sign_in(browser.new_context(java_script_enabled=False), api.url, alice)
    plain.goto(f"{api.url}/ui/jobs/{job_id}")
    expect(plain.get_by_role("heading", name="Status: succeeded")).to_be_visible()
    expect(plain.get_by_role("img", name=re.compile(r"\(before\)"))).to_have_count(3)
    farm.stop()
