"""Each rule of a submission, a cancel and a retry holds the same through every entry point: ``POST /v1/jobs``
as a multipart upload and as a JSON body, and the console's submit form; ``POST /v1/jobs/{id}/cancel|retry`` and
the console's buttons (a browser session, its CSRF token included). The same request answers the same status
everywhere (the console's redirect stands for the API's 200/202), and a refused one leaves no job."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from api.app import create_app
from shared.db import session_scope
from shared.models import Job, utcnow
from shared.settings import Settings
from tests.support.media import make_clip
from tests.support.tenants import bearer, make_key

PASSTHROUGH: dict[str, Any] = {"processors": ["passthrough"]}
TRANSPARENT: dict[str, Any] = {"processors": ["background_remover"], "background_remover": {"transparent": True}}
ACCEPTED = "accepted"  # 202 (or 200) from /v1, 303 to the job's page from the console


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the JSON entry point may read, holding a 20-frame, 1 fps, 64x36 clip (the issue's example)."""
    folder = tmp_path_factory.mktemp("inputs")
    make_clip(folder / "clip.mp4", seconds=20, size="64x36", rate="1", audio=False)
    return folder


@pytest.fixture
def base(settings: Settings, inputs: Path) -> Settings:
    return settings.model_copy(update={"input_url_prefixes": [f"file://{inputs}/"]})


@dataclass(frozen=True)
class Ask:
    """What a submission asks for, whatever carries it."""

    options: dict[str, Any] = field(default_factory=lambda: dict(PASSTHROUGH))
    priority: int | None = None
    callback_url: str | None = None


@dataclass(frozen=True)
class Answer:
    status: int
    code: str | None  # the error's code (the API's JSON; the console shows the message only)
    job_id: str | None


def _answer(response: httpx.Response) -> Answer:
    if response.status_code == 303:  # the console: to the new job's page
        return Answer(303, None, response.headers["location"].rsplit("/", 1)[-1])
    if response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        if body.get("error") and response.status_code >= 400:
            return Answer(response.status_code, body["error"]["code"], None)
        return Answer(response.status_code, None, body.get("id"))
    return Answer(response.status_code, None, None)


class Caller:
    """One key, as a script (Bearer) on /v1 and as a browser signed in to the console (cookie and CSRF token)."""

    def __init__(self, app: FastAPI, key: str) -> None:
        self.key = key
        self.api = TestClient(app, headers=bearer(key))
        self.browser = TestClient(app, follow_redirects=False)
        self._csrf: str | None = None

    @property
    def csrf(self) -> str:
        if self._csrf is None:
            form = self.browser.get("/ui/sign-in")
            token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
            assert token is not None
            done = self.browser.post("/ui/sign-in", data={"key": self.key, "csrf_token": token.group(1)})
            assert done.status_code == 303, done.text
            page = self.browser.get("/ui/jobs")
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert csrf is not None
            self._csrf = csrf.group(1)
        return self._csrf

    def jobs(self) -> list[str]:
        return [j["id"] for j in self.api.get("/v1/jobs", params={"limit": 200}).json()["jobs"]]


def _v1_upload(caller: Caller, clip: Path, ask: Ask) -> Answer:
    data = {"options": json.dumps(ask.options)}
    if ask.priority is not None:
        data["priority"] = str(ask.priority)
    if ask.callback_url is not None:
        data["callback_url"] = ask.callback_url
    files = {"target": ("clip.mp4", clip.read_bytes(), "video/mp4")}
    return _answer(caller.api.post("/v1/jobs", files=files, data=data))


def _v1_json(caller: Caller, clip: Path, ask: Ask) -> Answer:
    body: dict[str, Any] = {"target": {"url": f"file://{clip}"}, "options": ask.options}
    if ask.priority is not None:
        body["priority"] = ask.priority
    if ask.callback_url is not None:
        body["callback_url"] = ask.callback_url
    return _answer(caller.api.post("/v1/jobs", json=body))


def _fields(options: dict[str, Any], prefix: str = "options.") -> list[tuple[str, str]]:
    """Options as the console's form sends them: ``options.<path>`` fields, a list of choices as repeated fields, a
    list of numbers as one field of them separated by commas, a box that is ticked as ``on``."""
    out: list[tuple[str, str]] = []
    for name, value in options.items():
        if isinstance(value, dict):
            out += _fields(value, f"{prefix}{name}.")
        elif isinstance(value, list) and all(isinstance(v, int) for v in value):
            out.append((prefix + name, ",".join(str(v) for v in value)))
        elif isinstance(value, list):
            out += [(prefix + name, str(v)) for v in value]
        elif isinstance(value, bool):
            out.append((prefix + name, "on" if value else ""))
        else:
            out.append((prefix + name, str(value)))
    return out


def _console(caller: Caller, clip: Path, ask: Ask) -> Answer:
    data = [*_fields(ask.options), ("csrf_token", caller.csrf)]
    if ask.priority is not None:
        data.append(("priority", str(ask.priority)))
    if ask.callback_url is not None:
        data.append(("callback_url", ask.callback_url))
    files = {"target": ("clip.mp4", clip.read_bytes(), "video/mp4")}
    fields: dict[str, list[str]] = {}
    for name, value in data:
        fields.setdefault(name, []).append(value)
    return _answer(caller.browser.post("/ui/jobs", files=files, data=fields))


SUBMIT: dict[str, Callable[[Caller, Path, Ask], Answer]] = {
    "v1-multipart": _v1_upload,
    "v1-json": _v1_json,
    "console": _console,
}


@dataclass(frozen=True)
class Rule:
    ask: Ask
    status: int | str  # ACCEPTED, or the refusal's status
    code: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    admin: bool = False


SUBMIT_RULES = {
    "plain-job": Rule(Ask(), ACCEPTED),
    "admin-band-for-a-tenant": Rule(Ask(priority=10), 403, "forbidden"),
    "admin-band-for-an-admin": Rule(Ask(priority=10), ACCEPTED, admin=True),
    "invalid-options": Rule(Ask(options={**PASSTHROUGH, "encoder": {"quality": 101}}), 422, "options_invalid"),
    "enhancer-not-last": Rule(Ask(options={"processors": ["frame_enhancer", "face_blur"]}), 422, "options_invalid"),
    "colorizer-after-enhancer": Rule(
        Ask(options={"processors": ["frame_enhancer", "frame_colorizer"]}), 422, "options_invalid"
    ),  # fmt: skip
    "colorizer-size-not-offered": Rule(
        Ask(options={"processors": ["frame_colorizer"], "frame_colorizer": {"size": 200}}), 422, "options_invalid"
    ),  # fmt: skip
    "age-after-enhancer": Rule(
        Ask(options={"processors": ["face_enhancer", "age_modifier"]}), 422, "options_invalid"
    ),  # fmt: skip
    "deep-swapper-model-as-a-path": Rule(
        Ask(options={"processors": ["deep_swapper"], "deep_swapper": {"model": "../models/x"}}), 422, "options_invalid"
    ),  # fmt: skip
    "deep-swapper-custom-model": Rule(
        Ask(options={"processors": ["deep_swapper"], "deep_swapper": {"model": "custom/mine", "morph": 60}}), ACCEPTED
    ),  # the name is checked against the workers' custom/ folder when the model is loaded
    "restorer-before-the-swap": Rule(
        Ask(options={"processors": ["expression_restorer", "face_swapper"]}), 422, "options_invalid"
    ),  # fmt: skip
    "editor-control-off-its-step": Rule(
        Ask(options={"processors": ["face_editor"], "face_editor": {"head_yaw": 0.33}}), 422, "options_invalid"
    ),  # fmt: skip
    "remover-after-enhancer": Rule(
        Ask(options={"processors": ["frame_enhancer", "background_remover"]}), 422, "options_invalid"
    ),  # fmt: skip
    "transparency-from-an-encoder-without-alpha": Rule(Ask(options=TRANSPARENT), 422, "options_invalid"),
    "transparency-in-prores": Rule(Ask(options={**TRANSPARENT, "encoder": {"encoder": "prores_ks"}}), ACCEPTED),
    "model-of-a-disabled-licence": Rule(
        Ask(options={"processors": ["background_remover"], "background_remover": {"model": "rmbg_2.0"}}),
        422,
        "model_licence_disabled",
        {"disabled_licences": ["non-commercial"]},
    ),  # fmt: skip
    "companion-model-of-a-disabled-licence": Rule(  # ghost's own licence is Apache-2.0; the recogniser's is not
        Ask(options={"processors": ["face_swapper"], "face": {"swapper": "ghost_1_256"}}),
        422,
        "model_licence_disabled",
        {"disabled_licences": ["insightface"]},
    ),  # fmt: skip
    "model-of-an-allowed-licence": Rule(
        Ask(options={"processors": ["background_remover"]}), ACCEPTED, None, {"disabled_licences": ["non-commercial"]}
    ),  # fmt: skip
    "callback-to-loopback": Rule(Ask(callback_url="http://127.0.0.1:6379/"), 422, "callback_url_forbidden"),
    "callback-not-http": Rule(Ask(callback_url="ftp://hooks.example.com/"), 422, "callback_url_invalid"),
    "storage-quota": Rule(Ask(), 429, "storage_quota_exceeded", {"max_stored_bytes_per_tenant": 100}),
    "input-frames": Rule(Ask(), 422, "too_many_frames", {"max_frames": 10}),
    # the example: 20 frames at 1 fps resampled to 240 fps are 4,800 frames, over a limit of 100
    "output-frames-after-output-fps": Rule(
        Ask(options={**PASSTHROUGH, "output_fps": 240, "output_height": 4320}),
        422,
        "too_many_frames",
        {"max_frames": 100},
    ),  # fmt: skip
    "output-frame-pixels": Rule(
        Ask(options={**PASSTHROUGH, "output_height": 720}),
        422,
        "resolution_too_large",
        {"max_frame_pixels": 64 * 36 * 4},
    ),  # fmt: skip
    "output-pixels-per-job": Rule(
        Ask(options={**PASSTHROUGH, "output_height": 360}),
        422,
        "resolution_too_large",
        {"max_output_pixels": 20 * 640 * 360 - 1},
    ),  # fmt: skip
    "output-pixels-of-the-enhancer": Rule(
        Ask(options={"processors": ["frame_enhancer"], "frame_enhancer": {"model": "real_esrgan_x4"}}),
        422,
        "resolution_too_large",
        {"max_frame_pixels": 64 * 36 * 4},
    ),  # fmt: skip
    "output-frames-resampled": Rule(
        Ask(options={**PASSTHROUGH, "output_fps": 10}), 422, "too_many_frames", {"max_frames": 100}
    ),  # 200 frames written
    "output-frames-after-trim": Rule(
        Ask(options={**PASSTHROUGH, "trim_start_frame": 10, "output_fps": 10}), ACCEPTED, None, {"max_frames": 100}
    ),  # 10 frames kept, 100 written: at the limit, not over it
}


@contextmanager
def _app(base: Settings, changes: dict[str, Any]) -> Iterator[FastAPI]:
    app = create_app(base.model_copy(update=changes))
    with TestClient(app):  # the lifespan
        yield app


@pytest.mark.parametrize("entry", SUBMIT)
@pytest.mark.parametrize("rule", SUBMIT_RULES)
def test_a_submission_rule_holds_on_every_entry_point(base: Settings, inputs: Path, entry: str, rule: str) -> None:
    spec = SUBMIT_RULES[rule]
    with _app(base, spec.settings) as app:
        caller = Caller(app, make_key(base, admin=spec.admin))
        answer = SUBMIT[entry](caller, inputs / "clip.mp4", spec.ask)
        made = caller.jobs()
        if spec.status == ACCEPTED:
            assert answer.status == (303 if entry == "console" else 202), answer
            assert made == [answer.job_id]
            job = caller.api.get(f"/v1/jobs/{answer.job_id}").json()
            assert job["priority"] == (spec.ask.priority if spec.ask.priority is not None else 5)
        else:
            assert answer.status == spec.status, answer
            if entry != "console":
                assert answer.code == spec.code, answer
            assert made == [], "a refused submission makes no job"


def test_the_same_idempotency_key_for_another_request_conflicts_on_both_bodies(base: Settings, inputs: Path) -> None:
    with _app(base, {}) as app:
        caller = Caller(app, make_key(base))
        clip = inputs / "clip.mp4"
        files = {"target": ("clip.mp4", clip.read_bytes(), "video/mp4")}
        key = {"Idempotency-Key": "order-7"}
        first = caller.api.post("/v1/jobs", files=files, data={"options": json.dumps(PASSTHROUGH)}, headers=key)
        assert first.status_code == 202
        body = {"target": {"url": f"file://{clip}"}, "options": {**PASSTHROUGH, "chunk_frames": 5}}
        other = caller.api.post("/v1/jobs", json=body, headers=key)
        assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_conflict"
        assert caller.jobs() == [first.json()["id"]]


# -- cancel and retry ------------------------------------------------------------------------------------


def _v1_act(caller: Caller, job_id: str, action: str) -> Answer:
    return _answer(caller.api.post(f"/v1/jobs/{job_id}/{action}"))


def _console_act(caller: Caller, job_id: str, action: str) -> Answer:
    return _answer(caller.browser.post(f"/ui/jobs/{job_id}/{action}", data={"csrf_token": caller.csrf}))


ACT: dict[str, Callable[[Caller, str, str], Answer]] = {"v1": _v1_act, "console": _console_act}
_FAILED = {"status": "failed", "error_code": "processor_failed"}


@dataclass(frozen=True)
class ActRule:
    action: str
    state: dict[str, Any]  # the job's row is made to look like this first (``finished_ago``: seconds)
    status: int | str
    code: str | None = None
    foreign: bool = False  # acted on by another tenant's key
    after: str | None = None  # the job's status afterwards


TTL = 7 * 24 * 3600.0
ACT_RULES = {
    "cancel-a-queued-job": ActRule("cancel", {}, ACCEPTED, after="cancelled"),
    "cancel-another-tenants-job": ActRule("cancel", {}, 404, "not_found", foreign=True, after="queued"),
    "cancel-an-ended-job": ActRule(
        "cancel", {**_FAILED, "finished_ago": 60}, 409, "job_not_cancellable", after="failed"
    ),
    "retry-a-failed-job": ActRule("retry", {**_FAILED, "finished_ago": 60}, ACCEPTED, after="queued"),
    "retry-another-tenants-job": ActRule(
        "retry", {**_FAILED, "finished_ago": 60}, 404, "not_found", foreign=True, after="failed"
    ),
    "retry-past-the-retention-time": ActRule(
        "retry", {**_FAILED, "finished_ago": TTL + 60}, 410, "job_expired", after="failed"
    ),
    "retry-an-expired-job": ActRule(
        "retry", {**_FAILED, "finished_ago": TTL + 60, "expired": True}, 410, "job_expired", after="failed"
    ),
    "retry-a-job-that-has-not-failed": ActRule("retry", {}, 409, "job_not_retryable", after="queued"),
}


def _make_look(settings: Settings, job_id: str, state: dict[str, Any]) -> None:
    values = {k: v for k, v in state.items() if k not in {"finished_ago", "expired"}}
    if "finished_ago" in state:
        values["finished_at"] = utcnow() - timedelta(seconds=state["finished_ago"])
    if state.get("expired"):
        values["expired_at"] = utcnow()
    if values:
        with session_scope(settings.database_url) as s:
            s.execute(update(Job).where(Job.id == job_id).values(**values))


@pytest.mark.parametrize("entry", ACT)
@pytest.mark.parametrize("rule", ACT_RULES)
def test_a_cancel_or_retry_rule_holds_on_every_entry_point(base: Settings, inputs: Path, entry: str, rule: str) -> None:
    spec = ACT_RULES[rule]
    with _app(base, {"output_ttl_seconds": TTL}) as app:
        owner = Caller(app, make_key(base))
        submitted = _v1_upload(owner, inputs / "clip.mp4", Ask())
        assert submitted.status == 202 and submitted.job_id is not None
        job_id = submitted.job_id
        _make_look(base, job_id, spec.state)
        actor = Caller(app, make_key(base)) if spec.foreign else owner
        answer = ACT[entry](actor, job_id, spec.action)
        if spec.status == ACCEPTED:
            assert answer.status == (303 if entry == "console" else 200 if spec.action == "cancel" else 202), answer
        else:
            assert answer.status == spec.status, answer
            if entry != "console":
                assert answer.code == spec.code, answer
        with session_scope(base.database_url) as s:
            assert s.scalar(select(Job.status).where(Job.id == job_id)) == spec.after
