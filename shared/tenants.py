"""Tenants and their API keys: creating, listing and revoking keys, and finding who a request's key belongs to.

Which jobs a principal may see and act on is decided here too (:func:`owned_job`), for every route.

A key is ``sfk_ and 43 random URL-safe characters (256 bits). Only its sha256 is stored: a key has enough
entropy that a fast hash cannot be brute-forced, and a lookup by hash needs no constant-time comparison. The key
itself is shown once, when it is created. A revoked key stops working at the next request: every request reads
its key's row.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from shared.errors import InputError, NotFoundError
from shared.models import ApiKey, Job, Tenant, utcnow

KEY_PREFIX = "sfk_"
_TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
JOB_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Principal:
    """Who a request acts for. ``admin`` keys see every tenant's jobs."""

    tenant_id: str
    tenant_name: str
    key_id: str
    admin: bool


@dataclass(frozen=True)
class KeyInfo:
    id: str
    tenant: str
    name: str
    prefix: str
    admin: bool
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class CreatedKey:
    key: str  # the secret: shown once, never stored
    info: KeyInfo


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def ensure_tenant(session: Session, name: str, *, max_running_jobs: int | None = None) -> Tenant:
    """The tenant called ``name``, created when missing; ``max_running_jobs`` replaces its limit when given.

    Raises:
        InputError: the name is not 1–64 lower-case letters, digits, ``_``, ``.`` or ``-``.
    """
    if not _TENANT_NAME.fullmatch(name):
        raise InputError(f"tenant name {name!r}: use 1-64 of a-z, 0-9, '_', '.', '-'", code="tenant_name_invalid")
    tenant = session.scalars(select(Tenant).where(Tenant.name == name)).one_or_none()
    if tenant is None:
        tenant = Tenant(name=name, max_running_jobs=max_running_jobs, created_at=utcnow())
        session.add(tenant)
    elif max_running_jobs is not None:
        tenant.max_running_jobs = max_running_jobs
    session.flush()
    return tenant


def create_key(session: Session, tenant: str, *, name: str = "", admin: bool = False) -> CreatedKey:
    """Create a key for ``tenant`` (created when missing). The returned ``key`` is the only copy of the secret."""
    owner = ensure_tenant(session, tenant)
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(
        tenant_id=owner.id, name=name[:100], prefix=key[:12], key_hash=hash_key(key), admin=admin, created_at=utcnow()
    )
    session.add(row)
    session.flush()
    return CreatedKey(key=key, info=_info(row, owner.name))


def list_keys(session: Session, tenant: str | None = None) -> list[KeyInfo]:
    query = select(ApiKey, Tenant.name).join(Tenant, Tenant.id == ApiKey.tenant_id).order_by(ApiKey.created_at)
    if tenant is not None:
        query = query.where(Tenant.name == tenant)
    return [_info(key, tenant_name) for key, tenant_name in session.execute(query).all()]


def revoke_key(session: Session, key_id: str) -> KeyInfo:
    """Revoke the key with this id (or this unique prefix); revoking twice keeps the first time.

    Raises:
        NotFoundError: no key has this id, or the prefix matches none or several.
    """
    matches: Sequence[ApiKey] = session.scalars(
        select(ApiKey).where((ApiKey.id == key_id) | (ApiKey.prefix == key_id))
    ).all()
    if len(matches) != 1:
        raise NotFoundError(f"no single key with id or prefix {key_id!r}")
    key = matches[0]
    session.execute(update(ApiKey).where(ApiKey.id == key.id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow()))
    session.refresh(key)
    tenant = session.get_one(Tenant, key.tenant_id)
    return _info(key, tenant.name)


def authenticate(session: Session, key: str) -> Principal | None:
    """The principal of a live key; ``None`` for an unknown or revoked one."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    row = session.execute(
        select(ApiKey.id, ApiKey.admin, Tenant.id, Tenant.name)
        .join(Tenant, Tenant.id == ApiKey.tenant_id)
        .where(ApiKey.key_hash == hash_key(key), ApiKey.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    return Principal(tenant_id=row[2], tenant_name=row[3], key_id=row[0], admin=bool(row[1]))


def key_alive(session: Session, key_id: str) -> bool:
    """Whether the key with this id exists and is not revoked (a long request checks again as it runs)."""
    query = select(ApiKey.id).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
    return session.scalar(query) is not None


def _info(key: ApiKey, tenant: str) -> KeyInfo:
    return KeyInfo(
        id=key.id,
        tenant=tenant,
        name=key.name,
        prefix=key.prefix,
        admin=key.admin,
        created_at=key.created_at,
        revoked_at=key.revoked_at,
    )


def owned_job(session: Session, caller: Principal, job_id: str) -> Job:
    """The job, if the caller may see it: its own tenant's, or any for an admin key.

    Raises:
        NotFoundError: no such job, or another tenant's — the same answer, so nothing says which.
    """
    query = select(Job).where(Job.id == job_id)
    if not caller.admin:
        query = query.where(Job.tenant_id == caller.tenant_id)
    job = session.scalars(query).one_or_none() if JOB_ID.fullmatch(job_id) else None
    if job is None:
        raise NotFoundError(f"no job {job_id}")
    return job
