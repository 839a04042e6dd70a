"""``swapfarm group status|pause|resume|cancel|retry|download ID``: a job group (``swapfarm submit a.mp4 b.mp4 …``)
from a terminal, through the API (``/v1/groups``); each control is what ``shared.groups`` does to every member."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from cli.output import print_json
from cli.remote import Json, Key, Url, _client, _line, err, out

group = typer.Typer(no_args_is_help=True, help="A job group's state, its controls for every member, its ZIP.")
GroupArg = Annotated[str, typer.Argument(help="The group's id (swapfarm submit prints it first)")]


def _group_line(view: dict[str, Any]) -> str:
    """``<id> <status> <percent>% (<frames>, ETA …) — <n> <state>, …``."""
    p = view["progress"]
    frames = f"{p['frames_done']}/{p['frames_total']}" if p["frames_total"] is not None else f"{p['frames_done']}"
    eta = f", ETA {p['eta_seconds']:.0f}s" if p["eta_seconds"] is not None else ""
    members = ", ".join(f"{n} {state}" for state, n in sorted(view["jobs"].items()))
    name = f" {view['name']}" if view["name"] else ""
    return f"{view['id']}{name} {view['status']} {p['percent']:.1f}% ({frames} frames{eta}) — {members}"


@group.command("status")
def status(group_id: GroupArg, as_json: Json = False, url: Url = None, key: Key = None) -> None:
    """A group's state and progress, then one line per job."""
    with _client(url, key) as client:
        view = client.group(group_id)
        jobs = client.group_jobs(group_id)
    if as_json:
        print_json({"group": view, "jobs": [job.model_dump(mode="json") for job in jobs]})
        return
    out.print(_group_line(view), highlight=False, soft_wrap=True)
    for job in jobs:
        out.print(f"  {job.target_name}: {_line(job)}", highlight=False, soft_wrap=True)


def _control(group_id: str, action: str, url: str | None, key: str | None, *, now: bool = False) -> None:
    with _client(url, key) as client:
        out.print(_group_line(client.group_control(group_id, action, now=now)), highlight=False, soft_wrap=True)


@group.command("pause")
def pause(
    group_id: GroupArg,
    now: Annotated[bool, typer.Option("--now", help="Stop the running chunks too (re-queued, not counted)")] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Pause every member that can be paused (a member stitching finishes)."""
    _control(group_id, "pause", url, key, now=now)


@group.command("resume")
def resume(group_id: GroupArg, url: Url = None, key: Key = None) -> None:
    """Resume every paused member."""
    _control(group_id, "resume", url, key)


@group.command("cancel")
def cancel(group_id: GroupArg, url: Url = None, key: Key = None) -> None:
    """Cancel every member that has not ended (their files are deleted)."""
    _control(group_id, "cancel", url, key)


@group.command("retry")
def retry(group_id: GroupArg, url: Url = None, key: Key = None) -> None:
    """Run every failed member again (the group's webhook is sent again when they end)."""
    _control(group_id, "retry", url, key)


@group.command("download")
def download(
    group_id: GroupArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the ZIP")],
    url: Url = None,
    key: Key = None,
) -> None:
    """Download every succeeded member's video in one ZIP."""
    columns = (TextColumn("[bold]download"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with _client(url, key) as client, Progress(*columns, console=err) as bar:
        task = bar.add_task("bytes", total=None)
        client.download_group(group_id, output, on_progress=lambda done, total: bar.update(task, completed=done))
    err.print(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="group")
