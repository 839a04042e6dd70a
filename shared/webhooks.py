"""Webhooks: a job may name a ``callback_url``; when it ends, the farm POSTs ``job.succeeded``, ``job.failed`` or
``job.cancelled`` there, signed per the Standard Webhooks spec (https://www.standardwebhooks.com).

* **Outbox.** :func:`enqueue` writes the event to ``webhook_deliveries`` in the transaction that ends the job
  (``shared.lifecycle.end_job``: a stitch, a failure, a cancel), so an event exists exactly when the job
  ended, whoever dies afterwards. Workers deliver from the table (``workers.webhook_delivery``): a delivery is
  claimed with a lease, so one whose worker died mid-request is claimed again when the lease expires.
* **Retries.** A non-2xx answer, a timeout or a refused connection is tried again after a back-off that doubles
  (``webhook_retry_base_seconds`` … ``webhook_retry_max_seconds``, with jitter) until ``webhook_retry_for_seconds``
  (a day) after the job ended; then the event is abandoned. Every attempt is a job event (``webhook_delivered``,
  ``webhook_failed``, ``webhook_abandoned``) with its number and outcome.
* **Signatures.** ``webhook-id`` (the same on every attempt, for de-duplication), ``webhook-timestamp`` and
  ``webhook-signature`` (``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``) made by the ``standardwebhooks``
  library. Each tenant has its own secret, derived from ``SWAPFARM_SECRET_KEY`` (``GET /v1/webhooks/secret``).
* **SSRF.** :func:`check_callback_url` allows only ``https`` in production (``http`` too elsewhere), no user info,
  and a host whose *every* address is public, or inside ``webhook_allowed_networks`` (:func:`forbidden_reason`; an
  IPv6 address that carries an IPv4 one — mapped, NAT64, 6to4, Teredo … — is judged by the IPv4 one, and one whose
  IPv4 address cannot be found is refused). It runs at submission and
  again before each attempt, whose connection then goes to an address just checked (no second DNS lookup for an
  attacker to answer differently). A lookup gets ``webhook_resolve_timeout_seconds``: a name server that drops the
  query (an attacker's, or a flaky one) costs a request that long, not the resolver's own retries (10 s and more).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import json
import random
import re
import socket
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as LookupTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from urllib.parse import SplitResult, urlsplit

from sqlalchemy import or_, select
from sqlalchemy.orm import Session
from standardwebhooks import Webhook

from shared.addresses import IPAddress, IPNetwork, forbidden_reason
from shared.errors import CallbackUrlError, WebhookWorkerLostError
from shared.events import EventKind, record
from shared.models import Job, Tenant, WebhookDelivery, utcnow
from shared.states import JobStatus

EventType = Literal["job.succeeded", "job.failed", "job.cancelled", "job.awaiting_approval"]
EVENT_TYPES: dict[JobStatus, EventType] = {
    JobStatus.SUCCEEDED: "job.succeeded",
    JobStatus.FAILED: "job.failed",
    JobStatus.CANCELLED: "job.cancelled",
    JobStatus.AWAITING_APPROVAL: "job.awaiting_approval",  # not an end: its preview waits for approve or reject
}
MAX_URL_LENGTH = 2048
PENDING, DELIVERED, ABANDONED = "pending", "delivered", "abandoned"

Resolver = Callable[[str, int], Sequence[str]]
RESOLVE_TIMEOUT_SECONDS = 3.0  # the default of settings.webhook_resolve_timeout_seconds
# getaddrinfo cannot be interrupted: a lookup over its time is left to end in one of these threads. Eight of them
# bound what hung lookups hold; when all are taken, a new lookup waits its time in the queue and is refused too.
_LOOKUPS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="callback-dns")
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")


# -- the URL --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A checked callback URL: where to connect (a checked address) and what to call it (Host, SNI)."""

    url: SplitResult
    host: str
    port: int
    addresses: tuple[IPAddress, ...]

    def pinned_url(self) -> str:
        """The URL with the host replaced by the first checked address; the request sends ``Host: host_header``."""
        address = self.addresses[0]
        literal = f"[{address}]" if address.version == 6 else str(address)
        netloc = f"{literal}:{self.port}"
        path = self.url.path or "/"
        return f"{self.url.scheme}://{netloc}{path}" + (f"?{self.url.query}" if self.url.query else "")

    @property
    def host_header(self) -> str:
        default = 443 if self.url.scheme == "https" else 80
        name = f"[{self.host}]" if ":" in self.host else self.host
        return name if self.port == default else f"{name}:{self.port}"


def _resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _resolve_within(resolve: Resolver, host: str, port: int, timeout: float) -> list[str]:
    lookup = _LOOKUPS.submit(resolve, host, port)
    try:
        return list(lookup.result(timeout=timeout))
    except LookupTimeout:
        lookup.cancel()
        raise CallbackUrlError(f"callback_url: the host {host!r} did not resolve within {timeout:g} s") from None
    except (OSError, UnicodeError) as exc:
        raise CallbackUrlError(f"callback_url: the host {host!r} does not resolve") from exc


def check_callback_url(
    url: str,
    *,
    production: bool,
    allowed: Sequence[IPNetwork] = (),
    resolve: Resolver = _resolve,
    resolve_timeout: float = RESOLVE_TIMEOUT_SECONDS,
) -> Target:
    """The URL, checked for a webhook: its scheme, its form and every address its host resolves to, within
    ``resolve_timeout`` seconds.

    Raises:
        CallbackUrlError: ``callback_url_invalid`` (not an absolute http(s) URL, ``http`` in production, user
            info, a host that does not resolve in time) or ``callback_url_forbidden`` (an address of the host is
            loopback, link-local, private or otherwise not public, and not in ``allowed``).

    >>> check_callback_url("https://127.0.0.1/hook", production=True)
    Traceback (most recent call last):
    ...
    shared.errors.CallbackUrlError: callback_url_forbidden: callback_url: 127.0.0.1 is not a public address
    """
    if len(url) > MAX_URL_LENGTH or _UNSAFE.search(url):
        raise CallbackUrlError(f"callback_url: at most {MAX_URL_LENGTH} characters, no spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise CallbackUrlError(f"callback_url: not a valid URL ({exc})") from exc
    schemes = ("https",) if production else ("https", "http")
    if parts.scheme not in schemes:
        raise CallbackUrlError(f"callback_url: the scheme must be {' or '.join(schemes)}")
    if parts.username is not None or parts.password is not None:
        raise CallbackUrlError("callback_url: user names and passwords in the URL are not accepted")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise CallbackUrlError("callback_url: the URL has no host")
    port = port or (443 if parts.scheme == "https" else 80)
    try:
        literal: IPAddress | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        found = [str(literal)]
    else:
        found = _resolve_within(resolve, host, port, resolve_timeout)
    addresses = tuple(dict.fromkeys(ipaddress.ip_address(a.split("%", 1)[0]) for a in found))
    if not addresses:
        raise CallbackUrlError(f"callback_url: the host {host!r} does not resolve")
    for address in addresses:
        reason = forbidden_reason(address, allowed)
        if reason is not None:
            raise CallbackUrlError(f"callback_url: {reason}", code="callback_url_forbidden")
    return Target(url=parts, host=host, port=port, addresses=addresses)


# -- signing ---------------------------------------------------------------------------------------------


def signing_secret(secret_key: str, tenant_id: str | None) -> str:
    """The tenant's webhook secret (``whsec_…``, as Standard Webhooks writes secrets), derived from the farm's
    secret key: nothing to store, and a new ``SWAPFARM_SECRET_KEY`` gives every tenant a new one."""
    digest = hmac.new(secret_key.encode(), f"swapfarm-webhooks:{tenant_id or ''}".encode(), hashlib.sha256).digest()
    return "whsec_" + base64.b64encode(digest).decode()


def message_id(delivery_id: str) -> str:
    return f"msg_{delivery_id}"


def signed(delivery_id: str, payload: dict[str, Any], secret: str, at: datetime) -> tuple[bytes, dict[str, str]]:
    """The body and headers of one attempt: the same ``webhook-id`` on every attempt, the attempt's own
    timestamp and signature."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    msg_id = message_id(delivery_id)
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
        "user-agent": "swapfarm-webhooks/1",
    }
    return body.encode(), headers


# -- the outbox ------------------------------------------------------------------------------------------


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def enqueue(session: Session, job_id: str, status: JobStatus) -> None:
    """Add the job's end event to the outbox, in the caller's transaction; nothing when it has no callback URL."""
    row = session.execute(
        select(Job, Tenant.name).outerjoin(Tenant, Tenant.id == Job.tenant_id).where(Job.id == job_id)
    ).first()
    if row is None:
        return
    job, tenant = row
    session.refresh(job)  # the caller changed it with an UPDATE statement: read what it wrote
    if not job.callback_url:
        return
    now = utcnow()
    event_type = EVENT_TYPES[status]
    data = {
        "id": job.id,
        "status": str(status),
        "tenant": tenant,
        "target_name": job.target_name,
        "priority": job.priority,
        "frames_total": job.frames_total,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.started_at),
        "finished_at": _iso(job.finished_at or now),
        "error": {"code": job.error_code, "message": job.error_message or ""} if job.error_code else None,
        "links": {
            "job": f"/v1/jobs/{job.id}",
            "events": f"/v1/jobs/{job.id}/events",
            "output": f"/v1/jobs/{job.id}/output" if status == JobStatus.SUCCEEDED else None,
            "approve": f"/v1/jobs/{job.id}/approve" if status == JobStatus.AWAITING_APPROVAL else None,
        },
    }
    session.add(
        WebhookDelivery(
            id=uuid.uuid4().hex,
            job_id=job.id,
            tenant_id=job.tenant_id,
            event_type=event_type,
            url=job.callback_url,
            payload={"type": event_type, "timestamp": _iso(now), "data": data},
            status=PENDING,
            attempts=0,
            next_attempt_at=now,
            created_at=now,
        )
    )


@dataclass(frozen=True)
class Claim:
    """A delivery taken for one attempt."""

    id: str
    job_id: str
    tenant_id: str | None
    event_type: str
    url: str
    payload: dict[str, Any]
    attempt: int
    token: str
    created_at: datetime


def claim_due(session: Session, *, lease_seconds: float, limit: int, worker: str | None = None) -> list[Claim]:
    """Take up to ``limit`` deliveries that are due (and not held by a live lease) for one attempt each.

    A delivery found with an expired lease was being attempted by a worker that died before it recorded the
    answer: that attempt is recorded now, as failed.
    """
    now = utcnow()
    rows = session.scalars(
        select(WebhookDelivery)
        .where(WebhookDelivery.status == PENDING, WebhookDelivery.next_attempt_at <= now)
        .where(or_(WebhookDelivery.lease_expires_at.is_(None), WebhookDelivery.lease_expires_at < now))
        .order_by(WebhookDelivery.next_attempt_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    claims = []
    for row in rows:
        if row.lease_token is not None:
            message = f"{row.event_type} to {row.url}: the delivering worker stopped before the receiver answered"
            record(
                session, row.job_id, EventKind.WEBHOOK_FAILED, attempt=row.attempts,
                error_code=WebhookWorkerLostError.code, message=message,
            )  # fmt: skip
        row.attempts += 1
        row.lease_token = uuid.uuid4().hex
        row.lease_expires_at = now + timedelta(seconds=lease_seconds)
        claims.append(_claim(row))
    session.flush()
    return claims


def _claim(row: WebhookDelivery) -> Claim:
    assert row.lease_token is not None
    return Claim(
        id=row.id,
        job_id=row.job_id,
        tenant_id=row.tenant_id,
        event_type=row.event_type,
        url=row.url,
        payload=dict(row.payload),
        attempt=row.attempts,
        token=row.lease_token,
        created_at=row.created_at,
    )


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: ``ok`` for a 2xx answer; else a stable code and a line for the event log."""

    ok: bool
    code: str | None = None
    message: str = ""


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float
    max_seconds: float
    retry_for_seconds: float

    def delay(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1, 2, …): doubling from the base, capped, with jitter so
        that many deliveries failing at once do not retry at once."""
        raw: float = min(self.base_seconds * 2.0 ** min(attempt - 1, 40), self.max_seconds)
        return raw * (0.8 + 0.2 * random.random())


def record_attempt(
    session: Session, claim: Claim, outcome: Outcome, policy: RetryPolicy, *, worker: str | None = None
) -> str:
    """Record an attempt's outcome and its job event; returns the delivery's status after it.

    Nothing is recorded when the claim's lease was lost (another worker took the delivery over).
    """
    row = session.get(WebhookDelivery, claim.id, with_for_update=True)
    if row is None or row.lease_token != claim.token:
        return row.status if row is not None else ABANDONED
    now = utcnow()
    row.lease_token, row.lease_expires_at = None, None
    where = f"{claim.event_type} to {claim.url}"
    if outcome.ok:
        row.status, row.delivered_at, row.last_error = DELIVERED, now, None
        record(
            session, claim.job_id, EventKind.WEBHOOK_DELIVERED, attempt=claim.attempt, worker=worker,
            message=f"{where}: {outcome.message or 'acknowledged'}",
        )  # fmt: skip
        return row.status
    row.last_error = f"{outcome.code}: {outcome.message}"[:2000]
    wait = policy.delay(claim.attempt)
    if (now + timedelta(seconds=wait) - claim.created_at).total_seconds() > policy.retry_for_seconds:
        row.status = ABANDONED
        record(
            session, claim.job_id, EventKind.WEBHOOK_ABANDONED, attempt=claim.attempt, worker=worker,
            error_code=outcome.code, message=f"{where}: {outcome.message}; no more attempts",
        )  # fmt: skip
        return row.status
    row.next_attempt_at = now + timedelta(seconds=wait)
    record(
        session, claim.job_id, EventKind.WEBHOOK_FAILED, attempt=claim.attempt, worker=worker,
        error_code=outcome.code, message=f"{where}: {outcome.message}; next attempt in {wait:.1f}s",
    )  # fmt: skip
    return row.status
