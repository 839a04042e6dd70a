"""``swapfarm models …``: list, download and verify model files (a Typer sub-app the CLI mounts)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from shared.errors import ModelError
from shared.settings import get_settings
from workers.models.registry import REGISTRY

app = typer.Typer(help="List, download and verify the face models.", no_args_is_help=True)

_STATUS_STYLES = {"verified": "green", "unverified": "yellow", "mismatch": "red", "missing": "dim"}


def _size(size_bytes: int | None) -> str:
    return "?" if size_bytes is None else f"{size_bytes / 1e6:,.1f} MB"


@app.command("list")
def list_models() -> None:
    """Show every known model: kind, file, size, whether a sha256 is known, and its licence."""
    table = Table(title="models")
    for column in ("name", "kind", "file", "base", "size", "sha256", "licence"):
        table.add_column(column)
    for spec in REGISTRY.values():
        table.add_row(
            spec.name,
            spec.kind,
            spec.file_name,
            spec.base,
            _size(spec.size_bytes),
            spec.sha256[:12] + "…" if spec.sha256 else "[yellow]unknown[/]",
            spec.licence,
        )
    Console().print(table)


@app.command()
def download(
    names: Annotated[list[str], typer.Argument(help="Model names, as `models list` shows them")],
) -> None:
    """Make each named model available locally (offline folder, cache, or download), checking its sha256."""
    from workers.models.download import resolve

    console = Console()
    settings = get_settings()
    failed = False
    for name in names:
        try:
            console.print(f"{escape(name)}: {escape(str(resolve(name, settings)))}")
        except ModelError as error:
            console.print(f"[red]{escape(name)}: {escape(str(error))}[/]")
            failed = True
    if failed:
        raise typer.Exit(1)


@app.command()
def verify(
    names: Annotated[list[str] | None, typer.Argument(help="Model names; all models when omitted")] = None,
) -> None:
    """Check local model files against the registry's sha256.

    Exits 1 if a file's sha256 is wrong or a model named on the command line is missing.
    """
    from workers.models.download import ModelStatus
    from workers.models.download import verify as verify_model

    console = Console()
    settings = get_settings()
    table = Table(title="model files")
    for column in ("name", "status", "path", "sha256"):
        table.add_column(column)
    failed = False
    for name in names or list(REGISTRY):
        try:
            result = verify_model(name, settings)
        except ModelError as error:
            console.print(f"[red]{escape(str(error))}[/]")
            failed = True
            continue
        style = _STATUS_STYLES[result.status]
        table.add_row(escape(name), f"[{style}]{result.status}[/]", escape(str(result.path or "")), result.sha256 or "")
        failed |= result.status is ModelStatus.MISMATCH
        failed |= bool(names) and result.status is ModelStatus.MISSING
    console.print(table)
    if failed:
        raise typer.Exit(1)
