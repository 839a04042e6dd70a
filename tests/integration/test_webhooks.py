"""Signed webhooks from the outbox, through real workers and beat: retried until acknowledged, every attempt in
the job's events, and delivered even when the worker delivering it is killed mid-request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from ipaddress import ip_network
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from standardwebhooks import Webhook, WebhookVerificationError

from api.app import create_app
from shared.db import session_scope
from shared.models import WebhookDelivery
from shared.settings import Settings
from tests.integration.conftest import wait_finished
from tests.support.farm import Farm, wait_for
from tests.support.receiver import HANG, receiver
from tests.support.tenants import bearer

pytestmark = pytest.mark.integration


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "webhook_allowed_networks": [ip_network("127.0.0.0/8")],  # the test receiver is on the loopback
            "webhook_retry_base_seconds": 0.2,
            "webhook_poll_seconds": 0.3,
            "webhook_timeout_seconds": 3,
        }
    )


@pytest.fixture
def hook_farm(hook_settings: Settings, tmp_path: Path) -> Iterator[Farm]:
    logs = tmp_path / "hook-logs"
    logs.mkdir()
    farm = Farm(hook_settings, logs)
    yield farm
    farm.stop()


@pytest.fixture
def hook_api(hook_settings: Settings, api_key: str) -> Iterator[TestClient]:
    with TestClient(create_app(hook_settings), headers=bearer(api_key)) as client:
        yield client


def _submit(api: TestClient, clip: Path, callback_url: str) -> str:
    response = api.post(
        "/v1/jobs",
        files={"target": (clip.name, clip.read_bytes(), "video/mp4")},
        data={"options": json.dumps({"processors": ["passthrough"]}), "callback_url": callback_url},
    )
    assert response.status_code == 202, response.text
    assert response.json()["callback_url"] == callback_url
    return str(response.json()["id"])


def _webhook_events(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    events = api.get(f"/v1/jobs/{job_id}/events", params={"limit": 1000}).json()["events"]
    return [e for e in events if str(e["kind"]).startswith("webhook_")]


def _delivery(settings: Settings, job_id: str) -> WebhookDelivery:
    with session_scope(settings.database_url) as session:
        return session.scalars(select(WebhookDelivery).where(WebhookDelivery.job_id == job_id)).one()


def test_a_receiver_answering_500_twice_then_200_gets_one_signed_event_after_three_recorded_attempts(
    hook_farm: Farm, hook_api: TestClient, hook_settings: Settings, clip_short: Path
) -> None:
    hook_farm.worker("w1")
    hook_farm.beat()
    with receiver([500, 500, 200]) as hooks:
        job_id = _submit(hook_api, clip_short, hooks.url)
        assert wait_finished(hook_api, job_id, hook_farm)["status"] == "succeeded"
        wait_for(
            lambda: _delivery(hook_settings, job_id).status == "delivered", timeout=120, what="the acknowledgement"
        )
    assert len(hooks.requests) == 3
    secret = hook_api.get("/v1/webhooks/secret").json()["secret"]
    assert secret.startswith("whsec_")
    for request in hooks.requests:  # every attempt is signed, with the tenant's secret, for the same message
        event = Webhook(secret).verify(request.body, request.headers)
        assert event["type"] == "job.succeeded"
        assert event["data"]["id"] == job_id and event["data"]["links"]["output"] == f"/v1/jobs/{job_id}/output"
    assert len({r.headers["webhook-id"] for r in hooks.requests}) == 1, "retries keep the webhook-id"
    forged = dict(hooks.requests[0].headers, **{"webhook-signature": "v1," + "A" * 44})
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(hooks.requests[0].body, forged)
    attempts = _webhook_events(hook_api, job_id)
    assert [(e["kind"], e["attempt"], e["error_code"]) for e in attempts] == [
        ("webhook_failed", 1, "webhook_http_500"),
        ("webhook_failed", 2, "webhook_http_500"),
        ("webhook_delivered", 3, None),
    ]
    assert _delivery(hook_settings, job_id).attempts == 3


def test_a_worker_killed_while_delivering_leaves_the_event_to_another_worker(
    hook_farm: Farm, hook_api: TestClient, hook_settings: Settings, clip_short: Path
) -> None:
    hook_farm.worker("w1")
    hook_farm.beat()
    with receiver([HANG, 200]) as hooks:  # the first attempt never gets an answer
        job_id = _submit(hook_api, clip_short, hooks.url)
        assert wait_finished(hook_api, job_id, hook_farm)["status"] == "succeeded"
        wait_for(lambda: hooks.requests, timeout=120, what="the first delivery attempt")
        hook_farm.kill("w1")  # mid-request: the job has ended, the event is not delivered
        assert _delivery(hook_settings, job_id).status == "pending"
        hook_farm.worker("w2")
        wait_for(lambda: _delivery(hook_settings, job_id).status == "delivered", timeout=120, what="the delivery")
    assert len(hooks.requests) == 2
    assert [(e["kind"], e["attempt"], e["error_code"]) for e in _webhook_events(hook_api, job_id)] == [
        ("webhook_failed", 1, "webhook_worker_lost"),
        ("webhook_delivered", 2, None),
    ]
    secret = hook_api.get("/v1/webhooks/secret").json()["secret"]
    assert Webhook(secret).verify(hooks.requests[1].body, hooks.requests[1].headers)["type"] == "job.succeeded"
