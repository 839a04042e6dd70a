"""Tenants and API keys for tests, made the way ``swapfarm keys create`` makes them."""

from __future__ import annotations

import uuid

from shared.db import session_scope
from shared.settings import Settings
from shared.tenants import create_key, ensure_tenant


def make_key(
    settings: Settings, tenant: str | None = None, *, admin: bool = False, max_running_jobs: int = 1000
) -> str:
    """A key of ``tenant`` (a new one when not named); the default limit of jobs at once is out of the way."""
    name = tenant or f"t-{uuid.uuid4().hex[:12]}"
    with session_scope(settings.database_url) as session:
        ensure_tenant(session, name, max_running_jobs=max_running_jobs)
        return create_key(session, name, admin=admin).key


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
