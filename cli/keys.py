"""``swapfarm keys create|list|revoke`` and ``swapfarm tenants list|limit``: access to the farm, on the database.

These act on the database directly (run them where ``SWAPFARM_DATABASE_URL`` reaches it); a key is printed once,
when it is created, and only its hash is stored.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from cli.output import Column, print_json, show
from shared.settings import get_settings

keys = typer.Typer(no_args_is_help=True, help="API keys: create (shown once), list, revoke.")
tenants = typer.Typer(no_args_is_help=True, help="Tenants and their limit of jobs running at once.")
out = Console()
err = Console(stderr=True)
Json = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


@keys.command("create")
def create(
    tenant: Annotated[str, typer.Option(help="The tenant the key belongs to (created when new)")],
    name: Annotated[str, typer.Option(help="A label, e.g. who or what uses the key")] = "",
    admin: Annotated[bool, typer.Option(help="Farm-wide views: every tenant's jobs")] = False,
) -> None:
    """Create an API key and print it. It is shown this once: store it now."""
    from shared.db import session_scope
    from shared.errors import SwapfarmError
    from shared.tenants import create_key

    try:
        with session_scope(get_settings().database_url) as session:
            created = create_key(session, tenant, name=name, admin=admin)
    except SwapfarmError as exc:
        err.print(f"[red]{exc.code}[/]: {exc.message}")
        raise typer.Exit(2) from exc
    err.print(f"key {created.info.id} for tenant {tenant}{' (admin)' if admin else ''}; it is not shown again:")
    out.print(created.key, highlight=False, soft_wrap=True)


@keys.command("list")
def list_(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys")] = None, as_json: Json = False
) -> None:
    """List keys (their ids and first characters, never the keys)."""
    from dataclasses import asdict

    from shared.db import session_scope
    from shared.tenants import list_keys

    with session_scope(get_settings().database_url) as session:
        rows = list_keys(session, tenant)
    if as_json:
        print_json([asdict(key) for key in rows])
        return
    columns = [  # ids and prefixes whole: they are what `revoke` takes
        Column("id", inline=True),
        Column("prefix", inline=True),
        Column("tenant", inline=True),
        Column("admin", inline=True),
        Column("created", inline=True),
        Column("revoked", inline=True, labelled=True),
        Column("name"),
    ]
    cells = [
        [
            key.id,
            key.prefix,
            key.tenant,
            "admin" if key.admin else "",
            f"{key.created_at:%Y-%m-%d %H:%M}",
            f"{key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "",
            key.name,
        ]
        for key in rows
    ]
    show(out, columns, cells)


@keys.command("revoke")
def revoke(key_id: Annotated[str, typer.Argument(help="The key's id, or its prefix as listed")]) -> None:
    """Revoke a key: it stops working at its next request."""
    from shared.db import session_scope
    from shared.errors import SwapfarmError
    from shared.tenants import revoke_key

    try:
        with session_scope(get_settings().database_url) as session:
            info = revoke_key(session, key_id)
    except SwapfarmError as exc:
        err.print(f"[red]{exc.code}[/]: {exc.message}")
        raise typer.Exit(1) from exc
    err.print(f"revoked key {info.id} ({info.prefix}…) of tenant {info.tenant}")


@tenants.command("list")
def tenants_list(as_json: Json = False) -> None:
    """List tenants with their limit of jobs running at once."""
    from sqlalchemy import select

    from shared.db import session_scope
    from shared.models import Tenant

    settings = get_settings()
    with session_scope(settings.database_url) as session:
        rows = session.scalars(select(Tenant).order_by(Tenant.name)).all()
        found = [
            {
                "name": t.name,
                "max_running_jobs": t.max_running_jobs or settings.max_running_jobs_per_tenant,
                "default_limit": t.max_running_jobs is None,
                "created_at": t.created_at.isoformat(),
            }
            for t in rows
        ]
    if as_json:
        print_json(found)
        return
    columns = [Column("name", inline=True), Column("jobs at once", inline=True, labelled=True), Column("created")]
    cells = [
        [
            str(t["name"]),
            f"{t['max_running_jobs']}{' (default)' if t['default_limit'] else ''}",
            str(t["created_at"])[:16].replace("T", " "),
        ]
        for t in found
    ]
    show(out, columns, cells)


@tenants.command("limit")
def tenants_limit(
    name: Annotated[str, typer.Argument(help="The tenant (created when new)")],
    jobs: Annotated[int, typer.Argument(min=1, help="Jobs of this tenant running at once; the rest wait")],
) -> None:
    """Set how many of a tenant's jobs run at once."""
    from shared.db import session_scope
    from shared.tenants import ensure_tenant

    with session_scope(get_settings().database_url) as session:
        ensure_tenant(session, name, max_running_jobs=jobs)
    err.print(f"tenant {name}: {jobs} jobs at once")
