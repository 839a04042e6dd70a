"""The ``deliver_webhooks`` step: POST the outbox's due events (the reaper loop, ``swapfarm beat``, sends the task
every ``webhook_poll_seconds``).

Each due delivery is claimed with a lease (``shared.webhooks.claim_due``), its URL checked again against SSRF
and the connection made to the address just checked, then the outcome recorded with its job event. Deliveries of
one sweep run on a few threads, so a slow receiver holds a worker for about one timeout, not one per event.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import httpx

from shared import webhooks
from shared.db import session_scope
from shared.errors import CallbackUrlError, WebhookHttpError, WebhookTimeoutError, WebhookUnreachableError
from shared.models import utcnow
from shared.settings import Settings
from workers.runtime import Runtime

logger = logging.getLogger(__name__)

SWEEP_LIMIT = 16
THREADS = 8


def policy(settings: Settings) -> webhooks.RetryPolicy:
    return webhooks.RetryPolicy(
        settings.webhook_retry_base_seconds, settings.webhook_retry_max_seconds, settings.webhook_retry_for_seconds
    )


def lease_seconds(settings: Settings) -> float:
    """Long enough for one attempt and its bookkeeping; a delivery held longer was abandoned by a dead worker."""
    return 2 * settings.webhook_timeout_seconds + 5


def deliver_due(rt: Runtime) -> int:
    """Attempt every due delivery (up to a sweep's limit); returns how many were attempted."""
    with session_scope(rt.db) as session:
        claims = webhooks.claim_due(session, lease_seconds=lease_seconds(rt.settings), limit=SWEEP_LIMIT)
    if not claims:
        return 0
    with ThreadPoolExecutor(max_workers=min(THREADS, len(claims)), thread_name_prefix="webhook") as pool:
        list(pool.map(lambda claim: _deliver(rt, claim), claims))
    return len(claims)


def _deliver(rt: Runtime, claim: webhooks.Claim) -> None:
    outcome = attempt(claim, rt.settings)
    with session_scope(rt.db) as session:
        status = webhooks.record_attempt(session, claim, outcome, policy(rt.settings), worker=rt.hostname)
    log = logger.info if outcome.ok else logger.warning
    log(
        "job %s: webhook %s attempt %d to %s: %s (%s)",
        claim.job_id, claim.event_type, claim.attempt, claim.url, outcome.code or "ok", status,
    )  # fmt: skip


def attempt(claim: webhooks.Claim, settings: Settings) -> webhooks.Outcome:
    """One signed POST of the event; never raises for what the receiver or the network does."""
    try:
        target = webhooks.check_callback_url(
            claim.url,
            production=settings.environment == "production",
            allowed=settings.webhook_allowed_networks,
            resolve_timeout=settings.webhook_resolve_timeout_seconds,
        )
    except CallbackUrlError as exc:
        return webhooks.Outcome(False, exc.code, exc.message)
    secret = webhooks.signing_secret(settings.secret_key.get_secret_value(), claim.tenant_id)
    body, headers = webhooks.signed(claim.id, claim.payload, secret, utcnow())
    headers["host"] = target.host_header
    try:
        # trust_env=False: no proxy from the environment, so the connection goes to the address just checked.
        with httpx.Client(timeout=settings.webhook_timeout_seconds, follow_redirects=False, trust_env=False) as client:
            response = client.post(
                target.pinned_url(), content=body, headers=headers, extensions={"sni_hostname": target.host}
            )
    except httpx.TimeoutException:
        return webhooks.Outcome(
            False, WebhookTimeoutError.code, f"no answer within {settings.webhook_timeout_seconds:g}s"
        )
    except httpx.HTTPError as exc:
        return webhooks.Outcome(False, WebhookUnreachableError.code, f"{type(exc).__name__}: {exc}"[:300])
    if response.is_success:
        return webhooks.Outcome(True, None, f"HTTP {response.status_code}")
    return webhooks.Outcome(False, WebhookHttpError.code_for(response.status_code), f"HTTP {response.status_code}")
