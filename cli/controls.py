"""``swapfarm pause|resume|approve|reject``: a job's controls from a terminal, and ``swapfarm farm
pause|resume|status``: the whole farm's (admin keys), through the API; the decisions are ``shared.control``'s."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.remote import JobArg, Key, Url, _client, _line, out


def pause(
    job_id: JobArg,
    now: Annotated[bool, typer.Option("--now", help="Stop the running chunks too (re-queued, not counted)")] = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """Pause a job: no new chunk starts; running chunks finish (or stop at once with --now)."""
    with _client(url, key) as client:
        out.print(_line(client.control(job_id, "pause", now=now)), highlight=False, soft_wrap=True)


def resume(job_id: JobArg, url: Url = None, key: Key = None) -> None:
    """Resume a paused job: it goes on from the chunks already done."""
    with _client(url, key) as client:
        out.print(_line(client.control(job_id, "resume")), highlight=False, soft_wrap=True)


def approve(job_id: JobArg, url: Url = None, key: Key = None) -> None:
    """Approve a job's preview: the rest of its frames render."""
    with _client(url, key) as client:
        out.print(_line(client.control(job_id, "approve")), highlight=False, soft_wrap=True)


def reject(job_id: JobArg, url: Url = None, key: Key = None) -> None:
    """Reject a job's preview: the job is cancelled and its files deleted."""
    with _client(url, key) as client:
        out.print(_line(client.control(job_id, "reject")), highlight=False, soft_wrap=True)


farm = typer.Typer(no_args_is_help=True, help="Pause or resume the whole farm (admin keys), or show whether it is.")


def _farm_line(paused: bool) -> str:
    return "farm paused: no worker starts a chunk" if paused else "farm running"


@farm.command("pause")
def pause_farm(url: Url = None, key: Key = None) -> None:
    """Pause the whole farm: no worker starts a chunk until it is resumed; running chunks finish."""
    with _client(url, key) as client:
        out.print(_farm_line(client.farm("pause")), highlight=False)


@farm.command("resume")
def resume_farm(url: Url = None, key: Key = None) -> None:
    """Resume the farm: the queued chunks are sent to the workers again."""
    with _client(url, key) as client:
        out.print(_farm_line(client.farm("resume")), highlight=False)


@farm.command("status")
def farm_status(url: Url = None, key: Key = None) -> None:
    """Whether the farm is paused."""
    with _client(url, key) as client:
        out.print(_farm_line(client.farm()), highlight=False)


def register(app: typer.Typer) -> None:
    for command in (pause, resume, approve, reject):
        app.command()(command)
    app.add_typer(farm, name="farm")
