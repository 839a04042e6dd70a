"""The console's small urlencoded forms (sign-in, sign-out, cancel, retry) with more fields than a form of theirs
has answer 400 ``form_invalid``, never 500; the same forms within the bound still work."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from shared.settings import Settings
from tests.support.tenants import bearer, make_key

JOB_ID = "0" * 32
FORMS = ["/ui/sign-in", "/ui/sign-out", f"/ui/jobs/{JOB_ID}/cancel", f"/ui/jobs/{JOB_ID}/retry"]


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.headers.update(bearer(make_key(settings)))
        yield client


@pytest.mark.parametrize("path", FORMS)
def test_a_form_of_too_many_fields_answers_400(client: TestClient, path: str) -> None:
    fields = {f"f{i}": "x" for i in range(21)}
    response = client.post(path, data=fields, follow_redirects=False)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "form_invalid"


@pytest.mark.parametrize("path", FORMS)
def test_a_form_over_its_size_answers_413(client: TestClient, path: str) -> None:
    response = client.post(path, data={"csrf_token": "x" * 20_000}, follow_redirects=False)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("path", FORMS)
def test_a_form_within_the_bound_is_read(client: TestClient, path: str) -> None:
    """20 fields: the form is read and judged on what it says (a Bearer request needs no CSRF token)."""
    fields = {f"f{i}": "x" for i in range(19)} | {"key": "nope"}
    response = client.post(path, data=fields, follow_redirects=False)
    assert response.status_code in {303, 401, 404}, response.text
