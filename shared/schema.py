"""Bringing a database to the newest schema with Alembic (the only thing that changes the schema), and the rights
of the workers' and the API's database roles on it (neither owns a table: neither may change the schema)."""

from __future__ import annotations

import re
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import text

import migrations
from shared.db import engine_for


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


# What the workers' role may do (least privilege): read and change jobs, chunks and their events, read tenants and
# take their admission lock (FOR NO KEY UPDATE needs UPDATE), mark when a tenant was served, write a job's webhook
# event when it ends and record its deliveries, announce themselves for the console's workers page. Never the API
# keys or the console's sessions.
WORKER_GRANTS: dict[str, str] = {
    "jobs": "SELECT, UPDATE",
    "chunks": "SELECT, INSERT, UPDATE",
    "job_events": "SELECT, INSERT",
    "tenants": "SELECT, UPDATE",
    "webhook_deliveries": "SELECT, INSERT, UPDATE",
    "workers": "SELECT, INSERT, UPDATE",
    "worker_failures": "SELECT, INSERT",  # a chunk attempt that failed on it (``shared.worker_health``)
    "job_groups": "SELECT, UPDATE",  # a group's end, when its last job ends
    "farm_controls": "SELECT",  # whether an admin paused the farm (no chunk is claimed then)
}
WORKER_SEQUENCES = ("job_events_id_seq", "worker_failures_id_seq")
NO_ACCESS = ("api_keys", "ui_sessions", "alembic_version")
_ROLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


# What the API's role may do: submit jobs (jobs, their events, a tenant's admission lock and served-at), cancel and
# retry them (chunks), read and touch API keys (last use), open and end console sessions, queue a cancelled job's
# webhook, read the workers for the console. Never the schema (it owns nothing), never a key's deletion.
API_GRANTS: dict[str, str] = {
    "jobs": "SELECT, INSERT, UPDATE",
    "chunks": "SELECT, UPDATE",
    "job_events": "SELECT, INSERT",
    "tenants": "SELECT, UPDATE",
    "api_keys": "SELECT, UPDATE",
    "ui_sessions": "SELECT, INSERT, DELETE",
    "webhook_deliveries": "SELECT, INSERT",
    "workers": "SELECT, UPDATE",  # an admin releases a quarantined worker
    "worker_failures": "SELECT",
    "job_groups": "SELECT, INSERT, UPDATE, DELETE",  # DELETE: a group whose submission was refused part-way
    "farm_controls": "SELECT, INSERT, UPDATE",  # an admin pauses and resumes the farm (its one row, locked)
}
API_SEQUENCES = ("job_events_id_seq",)


def _grant(database_url: str, role: str, grants: dict[str, str], sequences: tuple[str, ...]) -> None:
    """Give the (existing) Postgres role ``role`` exactly ``grants`` (every other table: nothing).

    Raises:
        ValueError: ``role`` is not a plain lower-case identifier.
    """
    if not _ROLE.fullmatch(role):
        raise ValueError(f"not a role name: {role!r}")
    with engine_for(database_url).begin() as conn:
        conn.execute(text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
        for table in NO_ACCESS + tuple(API_GRANTS) + tuple(WORKER_GRANTS):
            conn.execute(text(f'REVOKE ALL ON TABLE "{table}" FROM "{role}"'))
        for table, rights in grants.items():
            conn.execute(text(f'GRANT {rights} ON TABLE "{table}" TO "{role}"'))
        for sequence in sequences:
            conn.execute(text(f'GRANT USAGE, SELECT ON SEQUENCE "{sequence}" TO "{role}"'))


def grant_worker_role(database_url: str, role: str) -> None:
    """Give the (existing) Postgres role ``role`` the workers' rights, and nothing on the API keys.

    Run after every upgrade, as the tables' owner: a new table is nobody's until granted here.

    Raises:
        ValueError: ``role`` is not a plain lower-case identifier.
    """
    _grant(database_url, role, WORKER_GRANTS, WORKER_SEQUENCES)


def grant_api_role(database_url: str, role: str) -> None:
    """Give the (existing) Postgres role ``role`` the API's rights (``API_GRANTS``): it writes jobs, events, keys'
    last use and sessions, and may not change the schema. Run after every upgrade, as the tables' owner.

    Raises:
        ValueError: ``role`` is not a plain lower-case identifier.
    """
    _grant(database_url, role, API_GRANTS, API_SEQUENCES)
