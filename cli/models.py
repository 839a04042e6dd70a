"""``swapfarm models …``: list, download and verify model files.

The registry and the downloader live with the workers; the API image has neither, and ``cli.main`` mounts these
commands only where they import.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from cli.output import Cell, Column, print_json, show
from shared.errors import LicenceDisabledError, ModelError
from shared.licences import LICENCES, disabled
from shared.settings import get_settings
from workers.models.custom import custom_models, custom_spec
from workers.models.registry import REGISTRY

app = typer.Typer(help="List, download and verify the face models.", no_args_is_help=True)

_STATUS_STYLES = {"verified": "green", "unverified": "yellow", "mismatch": "red", "missing": "dim"}
Json = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]


def _size(size_bytes: int | None) -> str:
    return "?" if size_bytes is None else f"{size_bytes / 1e6:,.1f} MB"


@app.command("list")
def list_models(as_json: Json = False) -> None:
    """Show every known model: kind, size, file, whether a sha256 is known, its licence, and whether the farm's
    ``disabled_licences`` setting disables it; and the operator's deep swapper models in the models folder's
    custom/ (as custom/<stem>)."""
    settings = get_settings()
    specs = [*REGISTRY.values(), *(custom_spec(name, path) for name, path in custom_models(settings).items())]
    rules = settings.disabled_licences
    if as_json:
        print_json(
            [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "file": s.file_name,
                    "base": s.base,
                    "size_bytes": s.size_bytes,
                    "sha256": s.sha256,
                    "input_size": s.input_size,
                    "licence": s.licence,
                    "licence_id": s.licence_id,
                    "commercial_use": LICENCES[s.licence_id].commercial,
                    "disabled": disabled(s.licence_id, rules),
                }
                for s in specs
            ]
        )
        return
    columns = [
        Column("name", inline=True),
        Column("kind", inline=True),
        Column("size", inline=True),
        Column("sha256", inline=True, labelled=True),
        Column("file"),
        Column("base"),
        Column("licence id"),
        Column("use", inline=True),
        Column("licence"),
    ]
    rows: list[list[Cell]] = [
        [
            s.name,
            s.kind,
            _size(s.size_bytes),
            s.sha256[:12] + "…" if s.sha256 else Text("unknown", style="yellow"),
            s.file_name,
            s.base,
            s.licence_id,
            Text("disabled", style="red") if disabled(s.licence_id, rules) else Text("allowed", style="green"),
            s.licence,
        ]
        for s in specs
    ]
    show(Console(), columns, rows, title="models")


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
            console.print(f"{escape(name)}: {escape(str(resolve(name, settings)))}", soft_wrap=True)
        except (ModelError, LicenceDisabledError) as error:
            console.print(f"[red]{escape(name)}: {escape(str(error))}[/]")
            failed = True
    if failed:
        raise typer.Exit(1)


@app.command()
def verify(
    names: Annotated[list[str] | None, typer.Argument(help="Model names; all models when omitted")] = None,
    as_json: Json = False,
) -> None:
    """Check local model files against the registry's sha256.

    Exits 1 if a file's sha256 is wrong or a model named on the command line is missing.
    """
    from workers.models.download import ModelStatus
    from workers.models.download import verify as verify_model

    console = Console(stderr=as_json)
    settings = get_settings()
    results = []
    failed = False
    for name in names or list(REGISTRY):
        try:
            result = verify_model(name, settings)
        except ModelError as error:
            console.print(f"[red]{escape(str(error))}[/]")
            failed = True
            continue
        results.append(result)
        failed |= result.status is ModelStatus.MISMATCH
        failed |= bool(names) and result.status is ModelStatus.MISSING
    if as_json:
        print_json(
            [
                {
                    "name": r.name,
                    "status": str(r.status),
                    "path": str(r.path) if r.path else None,
                    "sha256": r.sha256,
                    "expected_sha256": r.expected_sha256,
                }
                for r in results
            ]
        )
    else:
        columns = [Column("name", inline=True), Column("status", inline=True), Column("path"), Column("sha256")]
        rows: list[list[Cell]] = [
            [r.name, Text(str(r.status), style=_STATUS_STYLES[r.status]), str(r.path or ""), r.sha256 or ""]
            for r in results
        ]
        show(console, columns, rows, title="model files")
    if failed:
        raise typer.Exit(1)
