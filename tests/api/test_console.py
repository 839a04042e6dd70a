"""The jobs console (/ui) without a browser: sign-in to a session cookie, CSRF on every form that changes
something, sign-out, Bearer reading, tenant isolation identical to /v1, and the submit form's errors."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.ui.forms import form_value_count
from shared.db import session_scope
from shared.models import Job
from shared.settings import Settings
from shared.tenants import revoke_key
from tests.support.tenants import bearer, make_key

PASSTHROUGH = json.dumps({"processors": ["passthrough"]})


@pytest.fixture
def app_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), follow_redirects=False) as client:
        yield client


def _submit(client: TestClient, clip: Path, key: str) -> str:
    response = client.post(
        "/v1/jobs",
        files={"target": ("interview.mp4", clip.read_bytes(), "video/mp4")},
        data={"options": PASSTHROUGH},
        headers=bearer(key),
    )
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _sign_in(client: TestClient, key: str) -> str:
    """Sign in through the form as a browser does; returns the session's CSRF token (from the page)."""
    form = client.get("/ui/sign-in", params={"next": "/ui/jobs"})
    token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert token is not None
    done = client.post("/ui/sign-in", data={"key": key, "csrf_token": token.group(1), "next": "/ui/jobs"})
    assert done.status_code == 303 and done.headers["location"] == "/ui/jobs", done.text
    cookie = done.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert key not in cookie
    page = client.get("/ui/jobs")
    assert page.status_code == 200 and key not in page.text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None
    return csrf.group(1)


def test_a_browser_signs_in_to_a_session_and_signs_out(app_client: TestClient, settings: Settings) -> None:
    key = make_key(settings)
    assert app_client.get("/ui/jobs").headers["location"] == "/ui/sign-in?next=%2Fui%2Fjobs"
    csrf = _sign_in(app_client, key)
    session_cookie = app_client.cookies.get("swapfarm_session")
    assert session_cookie and session_cookie != key
    refused = app_client.post("/ui/sign-out", data={})
    assert refused.status_code == 403
    assert app_client.get("/ui/jobs").status_code == 200, "a refused sign-out leaves the session"
    out = app_client.post("/ui/sign-out", data={"csrf_token": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/ui/sign-in"
    app_client.cookies.set("swapfarm_session", session_cookie, path="/ui")  # replaying the old cookie
    assert app_client.get("/ui/jobs").status_code == 303, "the session ended on the server too"


def test_sign_in_needs_its_form_token_and_a_live_key(app_client: TestClient, settings: Settings) -> None:
    key = make_key(settings)
    forged = app_client.post("/ui/sign-in", data={"key": key, "csrf_token": "x" * 32})
    assert forged.status_code == 401 and "swapfarm_session" not in forged.headers.get("set-cookie", "")
    app_client.get("/ui/sign-in")
    token = app_client.cookies.get("swapfarm_sign_in")
    wrong = app_client.post("/ui/sign-in", data={"key": "sfk_not-a-key", "csrf_token": token})
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.text


def test_a_revoked_key_ends_its_sessions(app_client: TestClient, settings: Settings) -> None:
    key = make_key(settings)
    _sign_in(app_client, key)
    with session_scope(settings.database_url) as session:
        revoke_key(session, key[:12])
    assert app_client.get("/ui/jobs").status_code == 303


def test_forms_that_change_a_job_need_the_csrf_token(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    job_id = _submit(app_client, clip_short, key)
    csrf = _sign_in(app_client, key)
    refused = app_client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf_token": "forged"})
    assert refused.status_code == 403
    assert app_client.get(f"/v1/jobs/{job_id}", headers=bearer(key)).json()["status"] != "cancelled"
    upload = app_client.post(
        "/ui/jobs",
        files={"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options.processors": "passthrough"},
    )
    assert upload.status_code == 403, "the submit form needs it too"
    done = app_client.post(f"/ui/jobs/{job_id}/cancel", data={"csrf_token": csrf})
    assert done.status_code == 303 and done.headers["location"] == f"/ui/jobs/{job_id}"
    assert app_client.get(f"/v1/jobs/{job_id}", headers=bearer(key)).json()["status"] == "cancelled"
    assert len(app_client.get("/v1/jobs", headers=bearer(key)).json()["jobs"]) == 1, "the refused upload made no job"


def test_pages_read_with_a_bearer_key_and_tenants_see_only_their_own(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    alice, bob, admin = make_key(settings), make_key(settings), make_key(settings, admin=True)
    job_id = _submit(app_client, clip_short, alice)
    mine = app_client.get("/ui/jobs", headers=bearer(alice))
    assert mine.status_code == 200 and f"/ui/jobs/{job_id}" in mine.text and "interview.mp4" in mine.text
    page = app_client.get(f"/ui/jobs/{job_id}", headers=bearer(alice))
    assert page.status_code == 200 and 'id="job-progress"' in page.text and "submitted" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    theirs = app_client.get("/ui/jobs", headers=bearer(bob))
    assert job_id not in theirs.text
    hidden = app_client.get(f"/ui/jobs/{job_id}", headers=bearer(bob))
    missing = app_client.get(f"/ui/jobs/{'0' * 32}", headers=bearer(bob))
    assert hidden.status_code == missing.status_code == 404
    assert hidden.text.replace(job_id, "0" * 32) == missing.text, "another tenant's job reads as missing"
    for path in (f"/ui/jobs/{job_id}/live", f"/ui/jobs/{job_id}/stills/00-before.jpg"):
        assert app_client.get(path, headers=bearer(bob)).status_code == 404
    assert app_client.get(f"/ui/jobs/{job_id}/output", headers=bearer(bob)).status_code == 404
    everyone = app_client.get("/ui/jobs", headers=bearer(admin))
    assert job_id in everyone.text and 'id="filter-tenant"' in everyone.text
    tenant = app_client.get(f"/v1/jobs/{job_id}", headers=bearer(alice)).json()["tenant"]
    other = app_client.get("/ui/jobs", params={"tenant": "nobody-here"}, headers=bearer(admin))
    assert job_id not in other.text
    assert job_id in app_client.get("/ui/jobs", params={"tenant": tenant}, headers=bearer(admin)).text
    assert 'id="filter-tenant"' not in mine.text, "only admins filter by tenant"
    found = app_client.get("/ui/jobs", params={"q": "INTERVIEW", "status": "queued"}, headers=bearer(alice))
    assert job_id in found.text
    assert job_id not in app_client.get("/ui/jobs", params={"q": "other"}, headers=bearer(alice)).text


def test_the_submit_form_shows_each_error_next_to_its_field(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    form = app_client.get("/ui/jobs/new", headers=bearer(key))
    for name in ("options.processors", "options.preset", "options.face.selector_mode", "options.encoder.quality"):
        assert f'name="{name}"' in form.text
    assert 'min="0" max="100"' in form.text
    bad = app_client.post(
        "/ui/jobs",
        headers=bearer(key),
        files={"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options.processors": "face_blur", "options.encoder.quality": "101"},
    )
    assert bad.status_code == 422
    error = re.search(r'id="opt-encoder-quality-error"[^>]*>([^<]+)<', bad.text)
    assert error is not None and "100" in error.group(1)
    assert 'value="101"' in bad.text, "the form keeps what was typed"
    not_video = app_client.post(
        "/ui/jobs",
        headers=bearer(key),
        files={"target": ("c.mp4", b"not a video at all", "video/mp4")},
        data={"options.processors": "face_blur"},
    )
    assert not_video.status_code == 422 and re.search(r'id="target-error"[^>]*>[^<]*', not_video.text)
    no_source = app_client.post(
        "/ui/jobs",
        headers=bearer(key),
        files={"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options.processors": "face_swapper"},
    )
    assert no_source.status_code == 422 and 'id="source-error"' in no_source.text
    made = app_client.post(
        "/ui/jobs",
        headers=bearer(key),
        files={"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options.processors": "passthrough", "options.encoder.quality": "90", "priority": "7"},
    )
    assert made.status_code == 303
    job = app_client.get(made.headers["location"].replace("/ui/", "/v1/"), headers=bearer(key)).json()
    assert job["priority"] == 7


def test_the_submit_form_posts_a_job_that_requires_worker_tags(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    key = make_key(settings)
    form = app_client.get("/ui/jobs/new", headers=bearer(key))
    field = re.search(r'<input id="opt-required-tags"[^>]*>', form.text)
    assert field is not None and 'type="text"' in field.group(0) and "numeric" not in field.group(0)
    made = app_client.post(
        "/ui/jobs",
        headers=bearer(key),
        files={"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")},
        data={"options.processors": "passthrough", "options.required_tags": "studio-a, 48gb"},
    )
    assert made.status_code == 303, made.text
    job_id = made.headers["location"].rsplit("/", 1)[-1]
    with session_scope(settings.database_url) as session:
        job = session.get(Job, job_id)
        assert job is not None and job.options["required_tags"] == ["studio-a", "48gb"]
        assert job.required_tags == "48gb,studio-a", "the farm routes it by its tags"


def test_the_whole_submit_form_is_accepted_and_one_value_more_is_refused(
    app_client: TestClient, settings: Settings, clip_short: Path
) -> None:
    """A browser posts every field of the form (a hidden empty value beside each box): however many options the
    processors bring, that whole post fits the upload reader's cap, and a post past the form's own count does not."""
    key = make_key(settings)
    form = app_client.get("/ui/jobs/new", headers=bearer(key)).text
    fields = re.findall(r'<(?:input|select|textarea)\b[^>]*\bname="options\.[^"]+"[^>]*>', form)
    assert len(fields) > 96, "the form outgrew the fixed cap it once had"
    data: dict[str, list[str]] = {}
    for tag in fields:  # every field, a box's value where the page checks it (a preset's defaults), else empty
        name = re.search(r'name="([^"]+)"', tag)
        value = re.search(r'value="([^"]*)"', tag)
        checked = " checked" in tag and 'type="checkbox"' in tag
        assert name is not None
        data.setdefault(name.group(1), []).append(value.group(1) if checked and value else "")
    data["options.processors"] = ["passthrough"] + [""] * (len(data["options.processors"]) - 1)
    target = {"target": ("c.mp4", clip_short.read_bytes(), "video/mp4")}
    made = app_client.post("/ui/jobs", headers=bearer(key), files=target, data=data)
    assert made.status_code == 303, re.findall(r'role="alert"[^>]*>([^<]+)<', made.text)
    data["options.encoder.quality"] += [""] * 2
    refused = app_client.post("/ui/jobs", headers=bearer(key), files=target, data=data)
    assert refused.status_code == 422 and f"more than {form_value_count()} form fields" in refused.text
