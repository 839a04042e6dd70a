"""``/docs`` is Swagger UI served by the API itself: the page, its script and its stylesheet come from this origin,
its Content-Security-Policy allows nothing else, and in a browser it renders the API loading nothing from
another origin."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.browser import chromium
from tests.support.live import live_api


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as client:
        yield client


def test_the_docs_page_loads_only_files_of_its_own_origin(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    references = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert len(references) == 4, references  # the icon, the stylesheet, Swagger UI, and the script that starts it
    for ref in references:
        assert ref.startswith("/") and not ref.startswith("//"), ref
        asset = client.get(ref)
        assert asset.status_code == 200 and asset.headers["x-content-type-options"] == "nosniff", ref
        assert asset.headers["content-type"].split(";")[0] in {"text/css", "text/javascript", "image/png"}, ref
    policy = page.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "default-src 'none'" in policy
    assert "http" not in policy and "unsafe-eval" not in policy
    assert "<script>" not in page.text, "no inline script: the policy would block it"


def test_only_the_pages_own_files_are_served(client: TestClient) -> None:
    assert client.get("/docs/assets/swagger-ui.js.map").status_code == 404
    assert client.get("/docs/assets/..%2F..%2Fapp.py").status_code == 404
    assert client.get("/redoc").status_code == 404, "ReDoc would come from a CDN"
    assert client.get("/openapi.json").json()["info"]["title"] == "swapfarm"


def test_in_a_browser_the_docs_render_from_this_origin_alone(settings: Settings, tmp_path: Path) -> None:
    with live_api(settings, tmp_path) as api, chromium() as browser:
        page = browser.new_page()
        requested: list[str] = []
        refused: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.on("response", lambda response: refused.append(response.url) if response.status >= 400 else None)
        page.on("console", lambda message: refused.append(message.text) if message.type == "error" else None)
        page.goto(f"{api.url}/docs")  # then the operations, read from /openapi.json
        page.wait_for_selector(".opblock-summary-path[data-path='/v1/jobs']", timeout=15_000)
        assert requested and all(url.startswith(api.url + "/") for url in requested), requested
        assert not refused, refused  # no script or style blocked by the page's policy
