"""``swapfarm submit|status|list|cancel|retry|download``: the farm's API from a terminal.

The API's URL and key come from ``--url``/``--key`` or the settings (``SWAPFARM_API_URL``, ``SWAPFARM_API_KEY``).
Errors print the API's stable code and exit non-zero.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TransferSpeedColumn

from cli.output import Column, print_json, show
from shared.options import ProcessorName, choices
from shared.settings import get_settings
from shared.states import JobStatus

if TYPE_CHECKING:
    from api.client import Client
    from api.schemas import EventView, JobView

out = Console()
err = Console(stderr=True)

Url = Annotated[str | None, typer.Option("--url", help="The API (default: SWAPFARM_API_URL)")]
Key = Annotated[str | None, typer.Option("--key", help="API key (default: SWAPFARM_API_KEY)", show_default=False)]
JobArg = Annotated[str, typer.Argument(help="The job's id")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")]
Every = Annotated[
    float,
    typer.Option(
        min=0, help="Without a terminal, --watch prints a progress line each time the job crosses this many percent"
    ),
]


@contextmanager
def _client(url: str | None, key: str | None) -> Iterator[Client]:
    import httpx

    from api.client import ApiError, Client

    settings = get_settings()
    secret = key or (settings.api_key.get_secret_value() if settings.api_key else None)
    try:
        with Client(url or settings.api_url, secret) as client:
            yield client
    except ApiError as exc:
        err.print(f"[red]{exc.code}[/]: {exc.message}")
        raise typer.Exit(1) from exc
    except httpx.TransportError as exc:
        err.print(f"[red]unreachable[/]: {exc}")
        raise typer.Exit(1) from exc


def _line(job: JobView) -> str:
    p = job.progress
    frames = f"{p.frames_done}/{p.frames_total}" if p.frames_total is not None else f"{p.frames_done}"
    eta = ", recovering" if p.recovering else f", ETA {p.eta_seconds:.0f}s" if p.eta_seconds is not None else ""
    error = f" — {job.error.code}: {job.error.message}" if job.error else ""
    return f"{job.id} {job.status} {p.percent:.1f}% ({frames} frames{eta}){error}"


def _rate(job: JobView) -> str:
    """The bar's rate column: the measured rate and ETA, or ``recovering`` instead of an ETA on stale data."""
    p = job.progress
    fps = f"{p.frames_per_second:.1f} fps" if p.frames_per_second else ""
    if p.recovering:
        return ", ".join(x for x in (fps, "recovering") if x)
    return f"{fps}, ETA {p.eta_seconds:.0f}s" if fps and p.eta_seconds is not None else ""


def _event_line(event: EventView) -> str | None:
    if event.kind in {"chunk_started", "chunk_done"}:
        return None  # the bar shows these
    parts = [f"{event.at:%H:%M:%S}", str(event.kind)]
    if event.chunk_index is not None:
        parts.append(f"chunk {event.chunk_index}")
    if event.attempt is not None:
        parts.append(f"attempt {event.attempt}")
    if event.worker:
        parts.append(f"on {event.worker}")
    if event.error_code:
        parts.append(f"[red]{event.error_code}[/]")
    if event.message:
        parts.append(event.message)
    return " ".join(parts)


def _watch(client: Client, job_id: str, every: float = 10.0) -> JobView:
    """Follow the job until it ends; returns its final state. On a terminal a live bar; otherwise (a log, a pipe)
    one line per event and one each time the job changes state, crosses another ``every`` percent, or starts or
    stops recovering."""
    from api.schemas import EventView

    job = client.job(job_id)
    if not err.is_terminal:
        return _watch_lines(client, job, every)
    columns = (
        TextColumn("[bold]{task.fields[status]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
    )
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("frames", total=job.progress.frames_total, status=job.status, rate="")
        for item in client.follow(job_id):
            if isinstance(item, EventView):
                if line := _event_line(item):
                    bar.console.print(line, highlight=False)
                continue
            job, p = item, item.progress
            bar.update(task, completed=p.frames_done, total=p.frames_total, status=job.status, rate=_rate(job))
    return job


def _watch_lines(client: Client, job: JobView, every: float) -> JobView:
    from datetime import UTC, datetime  # the clock of the events' times

    from api.schemas import EventView

    shown: tuple[str, float, bool] | None = None
    for item in client.follow(job.id):
        if isinstance(item, EventView):
            if line := _event_line(item):
                err.print(line, highlight=False, soft_wrap=True)
            continue
        job, p = item, item.progress
        step = p.percent // every * every if every > 0 else p.percent
        now = (str(job.status), step, p.recovering)
        if now != shown:
            shown = now
            err.print(f"{datetime.now(UTC):%H:%M:%S} {_line(job)}", highlight=False, soft_wrap=True)
    return job


def _warnings(client: Client, job_id: str) -> list[EventView]:
    """The job's ``warning`` events: what made it worse without failing it."""
    found: list[EventView] = []
    after = 0
    while True:
        page = client.events(job_id, after)
        found += [e for e in page.events if e.kind == "warning"]
        if page.next_after is None or not page.events:
            return found
        after = page.next_after


def _finish(job: JobView) -> None:
    out.print(_line(job), highlight=False, soft_wrap=True)
    if job.status != JobStatus.SUCCEEDED:
        raise typer.Exit(1)


def _processor(values: list[str] | None) -> list[str]:
    for value in values or []:
        if value not in choices(ProcessorName):
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices(ProcessorName))}")
    return values or []


def _targets(values: list[str]) -> list[Path]:
    """The targets as given, a quoted glob (``'takes/*.mp4'``) expanded here, in sorted order."""
    import glob

    found: list[Path] = []
    for value in values:
        if any(c in value for c in "*?[") and not Path(value).exists():
            matched = sorted(glob.glob(value))
            if not matched:
                raise typer.BadParameter(f"{value!r} matches no file")
            found += [Path(m) for m in matched]
        else:
            found.append(Path(value))
    for path in found:
        if not path.is_file():
            raise typer.BadParameter(f"{str(path)!r} is not a file")
    return found


def submit(
    target: Annotated[
        list[str], typer.Argument(help="The video(s) to process; several (or a quoted glob) make a job group")
    ],
    source: Annotated[list[Path] | None, typer.Option(exists=True, dir_okay=False, help="Source face image")] = None,
    processor: Annotated[
        list[str] | None, typer.Option(callback=_processor, help="Processor, in order; repeatable")
    ] = None,
    options: Annotated[str, typer.Option(help="More JobOptions as JSON")] = "{}",
    source_audio: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Source audio the mouths follow (lip_syncer)")
    ] = None,
    priority: Annotated[
        int | None, typer.Option(min=0, max=10, help="0 lowest … 9 most urgent; 10: farm-wide (admin keys)")
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option(help="Submitting again with it answers the same job")] = None,
    name: Annotated[str, typer.Option(help="A group's label (several targets)")] = "",
    partial: Annotated[bool, typer.Option(help="A group: refused targets are listed, the others go ahead")] = False,
    watch: Annotated[bool, typer.Option(help="Follow the job until it ends")] = False,
    every: Every = 10.0,
    url: Url = None,
    key: Key = None,
) -> None:
    """Submit a job to the farm; prints its id (and follows it with --watch). Several targets make a job group:
    prints the group's id, then each job's."""
    try:
        data = json.loads(options)
    except ValueError as exc:
        raise typer.BadParameter(f"--options: {exc}") from exc
    if processor:
        data["processors"] = processor
    targets = _targets(target)
    with _client(url, key) as client:
        if len(targets) > 1:
            group = client.submit_group(
                targets, source or [], options=data, priority=priority, name=name, partial=partial
            )
            out.print(group["id"], highlight=False, soft_wrap=True)
            for job_id in group["job_ids"]:
                out.print(f"  {job_id}", highlight=False, soft_wrap=True)
            for refused in group["refused"]:
                err.print(f"[red]{refused['code']}[/]: {refused['target_name']}: {refused['message']}", soft_wrap=True)
            return
        job = client.submit(
            targets[0], source or [], options=data, priority=priority, idempotency_key=idempotency_key,
            audio=source_audio,
        )  # fmt: skip
        out.print(job.id, highlight=False, soft_wrap=True)
        if watch:
            _finish(_watch(client, job.id, every))


def status(
    job_id: JobArg,
    watch: Annotated[bool, typer.Option(help="Follow the job with a live progress bar until it ends")] = False,
    chunks: Annotated[
        bool, typer.Option(help="Show every chunk with its state, attempts, worker and the error of a failed one")
    ] = False,
    as_json: Json = False,
    every: Every = 10.0,
    url: Url = None,
    key: Key = None,
) -> None:
    """A job's state and progress."""
    with _client(url, key) as client:
        if watch:
            _finish(_watch(client, job_id, every))
            return
        job = client.job(job_id)
        rows = client.chunks(job_id).chunks if chunks else []
        warnings = _warnings(client, job_id)
    if as_json:
        data = job.model_dump(mode="json")
        print_json({"job": data, "chunks": [c.model_dump(mode="json") for c in rows]} if chunks else data)
        return
    out.print(_line(job), highlight=False, soft_wrap=True)
    for warning in warnings:
        out.print(f"[yellow]warning[/] {warning.error_code}: {warning.message}", highlight=False, soft_wrap=True)
    if chunks:
        columns = [
            Column("chunk", inline=True),
            Column("frames", inline=True),
            Column("status", inline=True),
            Column("attempts", inline=True, labelled=True),
            Column("worker", inline=True),
            Column("error"),
        ]
        cells = [
            [
                str(c.index),
                f"{c.frame_start}-{c.frame_end - 1}",
                c.status,
                str(c.attempts),
                c.worker or "",
                f"{c.error.code}: {c.error.message}" if c.error else "",
            ]
            for c in rows
        ]
        show(out, columns, cells)


def list_jobs(
    status: Annotated[list[JobStatus] | None, typer.Option(help="Only jobs in this state; repeatable")] = None,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
    all_tenants: Annotated[bool, typer.Option(help="Every tenant's jobs (admin keys)")] = False,
    as_json: Json = False,
    url: Url = None,
    key: Key = None,
) -> None:
    """The newest jobs."""
    with _client(url, key) as client:
        page = client.jobs(status=[str(s) for s in status or []], limit=limit, all_tenants=all_tenants)
    if as_json:
        print_json(page.model_dump(mode="json"))
        return
    columns = [
        Column("id", inline=True),
        Column("status", inline=True),
        Column("progress", inline=True),
        Column("priority", inline=True, labelled=True),
        Column("created", inline=True),
        Column("target"),
    ]
    if all_tenants:
        columns.append(Column("tenant", inline=True))
    rows = [
        [
            job.id,
            job.status,
            f"{job.progress.percent:.1f}%",
            str(job.priority),
            f"{job.created_at:%Y-%m-%d %H:%M:%S}",
            job.target_name,
            *([job.tenant or ""] if all_tenants else []),
        ]
        for job in page.jobs
    ]
    show(out, columns, rows)


def cancel(job_id: JobArg, url: Url = None, key: Key = None) -> None:
    """Cancel a job: its running chunks stop after their current batch, its files are deleted."""
    with _client(url, key) as client:
        out.print(_line(client.cancel(job_id)), highlight=False, soft_wrap=True)


def retry(
    job_id: JobArg,
    watch: Annotated[bool, typer.Option(help="Follow the job until it ends")] = False,
    every: Every = 10.0,
    url: Url = None,
    key: Key = None,
) -> None:
    """Run a failed job again: only its chunks that are not done are rendered again."""
    with _client(url, key) as client:
        job = client.retry(job_id)
        out.print(_line(job), highlight=False, soft_wrap=True)
        if watch:
            _finish(_watch(client, job_id, every))


def download(
    job_id: JobArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the video")],
    url: Url = None,
    key: Key = None,
) -> None:
    """Download a job's output (resumes an interrupted download)."""
    columns = (TextColumn("[bold]download"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with _client(url, key) as client, Progress(*columns, console=err) as bar:
        task = bar.add_task("bytes", total=None)
        client.download(job_id, output, on_progress=lambda done, total: bar.update(task, completed=done, total=total))
    err.print(f"wrote {output}")


def release_worker(
    name: Annotated[str, typer.Argument(help="The worker's name, as the workers page shows it to an admin")],
    url: Url = None,
    key: Key = None,
) -> None:
    """Admin keys only: release a quarantined worker (it failed chunks of several jobs); it takes work again."""
    with _client(url, key) as client:
        client.release_worker(name)
    out.print(f"{name}: released", highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command()(submit)
    app.command()(status)
    app.command("list")(list_jobs)
    app.command()(cancel)
    app.command()(retry)
    app.command()(download)
    app.command("release-worker")(release_worker)
