"""Who is looking at the console: a browser's session, or a script's ``Authorization: Bearer`` key.

* **Sign-in** exchanges an API key for a session: the browser gets a random token in an ``HttpOnly``,
  ``SameSite=Strict`` cookie (``Secure`` in production or over https); the database keeps its sha256 and the key's
  id, never the key. No script on the page can read the key or the token. A session acts as its key: a revoked
  key ends it at the next request; sign-out deletes it.
* **CSRF.** Every form that changes something carries the session's CSRF token, checked against the one stored
  with the session (``SameSite=Strict`` already keeps other sites' requests from carrying the cookie; the token
  is the second lock). The sign-in form, before any session exists, is protected by a double-submit cookie.
  Requests with a Bearer key need no token: no browser attaches that header on its own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from fastapi import Request, Response
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from shared.db import session_scope
from shared.models import ApiKey, Tenant, UiSession, utcnow
from shared.settings import Settings
from shared.tenants import Principal, authenticate

SESSION_COOKIE = "swapfarm_session"
SIGN_IN_COOKIE = "swapfarm_sign_in"
COOKIE_PATH = "/ui"


@dataclass(frozen=True)
class Viewer:
    """The principal behind a console request; ``csrf`` is ``None`` for Bearer requests (no token needed)."""

    principal: Principal
    csrf: str | None


class SignInRequired(Exception):
    """No session or key, or an expired or revoked one: the browser goes to the sign-in page."""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _secure(request: Request, settings: Settings) -> bool:
    return settings.environment == "production" or request.url.scheme == "https"


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


def viewer_of(request: Request) -> Viewer:
    """The request's viewer: its Bearer key if it sends one, else its session cookie.

    Raises:
        SignInRequired: neither is valid.
    """
    settings: Settings = request.app.state.settings
    key = _bearer(request)
    if key is not None:
        with session_scope(settings.database_url) as session:
            found = authenticate(session, key)
        if found is None:
            raise SignInRequired
        return Viewer(found, None)
    token = request.cookies.get(SESSION_COOKIE)
    if not token or len(token) > 200:
        raise SignInRequired
    with session_scope(settings.database_url) as session:
        row = session.execute(
            select(UiSession.csrf_token, ApiKey.id, ApiKey.admin, Tenant.id, Tenant.name)
            .join(ApiKey, ApiKey.id == UiSession.key_id)
            .join(Tenant, Tenant.id == ApiKey.tenant_id)
            .where(UiSession.token_hash == _digest(token), UiSession.expires_at > utcnow())
            .where(ApiKey.revoked_at.is_(None))
        ).first()
    if row is None:
        raise SignInRequired
    csrf, key_id, admin, tenant_id, tenant_name = row
    return Viewer(Principal(tenant_id=tenant_id, tenant_name=tenant_name, key_id=key_id, admin=bool(admin)), csrf)


def csrf_ok(viewer: Viewer, submitted: str | None) -> bool:
    """Whether a state-changing request may go on: a Bearer request, or the session's own token."""
    if viewer.csrf is None:
        return True
    return submitted is not None and hmac.compare_digest(viewer.csrf.encode(), submitted.encode())


def sign_in(session: Session, key: str, lifetime_seconds: float) -> str | None:
    """Open a session for a live key; returns the cookie's token (``None`` for an unknown or revoked key)."""
    found = authenticate(session, key)
    if found is None:
        return None
    now = utcnow()
    session.execute(delete(UiSession).where(UiSession.expires_at < now))  # sweep: nothing else removes them
    token = secrets.token_urlsafe(32)
    session.add(
        UiSession(
            token_hash=_digest(token),
            key_id=found.key_id,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + timedelta(seconds=lifetime_seconds),
        )
    )
    return token


def sign_out(request: Request, response: Response) -> None:
    """End the request's session (the row and the cookie)."""
    settings: Settings = request.app.state.settings
    token = request.cookies.get(SESSION_COOKIE)
    if token:
        with session_scope(settings.database_url) as session:
            session.execute(delete(UiSession).where(UiSession.token_hash == _digest(token)))
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, secure=_secure(request, settings), httponly=True)


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    settings: Settings = request.app.state.settings
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=int(settings.ui_session_seconds),
        path=COOKIE_PATH,
        secure=_secure(request, settings),
        httponly=True,
        samesite="strict",
    )


def sign_in_token(request: Request) -> str:
    """The sign-in form's double-submit token (the browser's, if it has one): in a cookie and in the form; a
    sign-in needs both to agree, which a page of another site cannot arrange."""
    token = request.cookies.get(SIGN_IN_COOKIE, "")
    return token if 20 <= len(token) <= 64 else secrets.token_urlsafe(24)


def set_sign_in_cookie(request: Request, response: Response, token: str) -> None:
    settings: Settings = request.app.state.settings
    response.set_cookie(
        SIGN_IN_COOKIE, token, path=COOKIE_PATH, secure=_secure(request, settings), httponly=True, samesite="strict"
    )


def sign_in_token_ok(request: Request, submitted: str | None) -> bool:
    cookie = request.cookies.get(SIGN_IN_COOKIE)
    return bool(cookie and submitted) and hmac.compare_digest(str(cookie).encode(), str(submitted).encode())
