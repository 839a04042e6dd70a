"""The ``swapfarm`` command. Each subcommand imports what it needs when it runs, so the API image (no worker
extra) can still run ``swapfarm api`` and ``swapfarm db upgrade``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from cli import controls, groups, keys, remote
from shared.options import ProcessorName, choices
from shared.settings import get_settings

app = typer.Typer(no_args_is_help=True, add_completion=False, help="A render farm for face-swap video.")
db = typer.Typer(no_args_is_help=True, help="Database schema.")
app.add_typer(db, name="db")
app.add_typer(keys.keys, name="keys")
app.add_typer(keys.tenants, name="tenants")
remote.register(app)  # submit, status, list, cancel, retry, download: the API's client
controls.register(app)  # pause, resume, approve, reject
groups.register(app)  # group status|pause|resume|cancel|retry|download
err = Console(stderr=True)

try:  # the models commands need the worker extra (the model registry); the API image has none
    from cli.models import app as models_app

    app.add_typer(models_app, name="models", help="List, download and verify model files.")
except ImportError:  # pragma: no cover - only in the slim API image
    pass


def _processor(value: str) -> str:
    if value not in choices(ProcessorName):
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(choices(ProcessorName))}")
    return value


@app.command()
def run(
    target: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="The video to process")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the result (MP4; a MOV file with prores_ks)")
    ],
    source: Annotated[list[Path] | None, typer.Option(exists=True, dir_okay=False, help="Source face image")] = None,
    processor: Annotated[
        list[str] | None,
        typer.Option(callback=lambda v: [_processor(x) for x in v or []], help="Processor, in order; repeatable"),
    ] = None,
    chunk_frames: Annotated[int | None, typer.Option(min=1, help="Frames per chunk")] = None,
    trim_start_frame: Annotated[int | None, typer.Option(min=0, help="First frame rendered (from 0, included)")] = None,
    trim_end_frame: Annotated[
        int | None, typer.Option(min=1, help="Frame the render stops before (excluded): 50..149 is 50 and 150")
    ] = None,
    output_height: Annotated[int | None, typer.Option(help="Output height in pixels, keeping the aspect")] = None,
    output_fps: Annotated[float | None, typer.Option(help="Output frame rate (same duration)")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Chunks rendered in parallel")] = 2,
    options: Annotated[str, typer.Option(help="More JobOptions as JSON")] = "{}",
    source_audio: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Source audio the mouths follow (lip_syncer)")
    ] = None,
    state_dir: Annotated[Path | None, typer.Option(help="Keep the SQLite file and chunks here")] = None,
) -> None:
    """Run one job on this machine, without any server: the farm's own steps, in-process."""
    from cli.logs import configure
    from shared.containers import container_of
    from shared.errors import SwapfarmError
    from shared.options import JobOptions

    _cap_images(get_settings().max_source_pixels)  # before OpenCV loads: it reads its cap once
    from workers.local import run_local

    configure("WARNING", json_lines=False)
    try:
        data = json.loads(options)
        if processor:
            data["processors"] = processor
        if chunk_frames:
            data["chunk_frames"] = chunk_frames
        output_frames = {
            "trim_start_frame": trim_start_frame,
            "trim_end_frame": trim_end_frame,
            "output_height": output_height,
            "output_fps": output_fps,
        }
        data.update({key: value for key, value in output_frames.items() if value is not None})
        job_options = JobOptions.model_validate(data)
    except ValueError as exc:
        err.print(f"[red]options_invalid[/]: {exc}")
        raise typer.Exit(2) from exc
    with Progress(
        TextColumn("[bold]rendering"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err
    ) as bar:
        task = bar.add_task("frames", total=None)

        def on_progress(done: int, total: int | None) -> None:
            bar.update(task, completed=done, total=total)

        try:
            result = run_local(
                target=target,
                sources=source or [],
                audio=source_audio,
                output=output,
                options=job_options,
                workers=workers,
                settings=get_settings(),
                state_dir=state_dir,
                on_progress=on_progress,
            )
        except SwapfarmError as exc:
            bar.stop()
            err.print(f"[red]{exc.code}[/]: {exc.message}")
            raise typer.Exit(1) from exc
    for code, message in result.warnings:
        err.print(f"[yellow]{code}[/]: {message}")
    if result.status != "succeeded":
        err.print(f"[red]{result.error_code}[/]: {result.error_message}")
        raise typer.Exit(1)
    container = container_of(job_options.encoder.encoder)
    written = "" if output.suffix.lower() == container.extension else f", a {container.extension[1:].upper()} file"
    err.print(f"wrote {output} ({result.frames_total} frames{written})")


def _cap_images(max_pixels: int) -> None:
    """OpenCV's image-size cap (read from the environment once, when OpenCV loads): no image decoded in this
    process — a source image, above all — may have more pixels than the farm accepts."""
    os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(max_pixels))


@app.command()
def api(
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8000,
    workers: Annotated[int, typer.Option(min=1)] = 1,
) -> None:
    """Serve the HTTP API (uvicorn)."""
    import uvicorn

    from api.server import uvicorn_options
    from cli.logs import configure

    configure()
    settings = get_settings()  # fail fast on bad settings, before binding the port
    uvicorn.run(
        "api.app:create_app", factory=True, host=host, port=port, workers=workers, log_config=None,
        **uvicorn_options(settings),
    )  # fmt: skip


@app.command()
def worker(
    queues: Annotated[
        str | None,
        typer.Option(help="Comma-separated queues; default: control, stitch, render.<family>, render.any"),
    ] = None,
    concurrency: Annotated[int | None, typer.Option(min=1)] = None,
    name: Annotated[str | None, typer.Option(help="Worker name, e.g. gpu0@%h")] = None,
    pool: Annotated[str, typer.Option(help="Celery pool")] = "prefork",
    gpu: Annotated[
        int | None, typer.Option(min=0, help="Use only GPU N (one worker process per GPU on multi-GPU hosts)")
    ] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option(help="A tag of this worker (repeatable, e.g. studio-a, 48gb): jobs' required_tags need them"),
    ] = None,
) -> None:
    """Run a Celery worker consuming the queues of this machine's accelerator family.

    Refuses to start under the name of a worker that is running (exit 2, ``worker_name_taken``). Logs are JSON
    lines when stderr is not a terminal, the banner's facts (queues and their routing) included."""
    if tag:  # the settings' worker_tags, inherited by the pool's processes
        import re

        from shared.options import TAG_PATTERN

        bad_tags = [t for t in tag if not re.fullmatch(TAG_PATTERN, t)]
        if bad_tags:
            raise typer.BadParameter(f"--tag {bad_tags[0]!r}: lower-case letters, digits, '.', '_', '-' (32 at most)")
        os.environ["SWAPFARM_WORKER_TAGS"] = json.dumps(sorted(set(tag)))
    if gpu is not None:  # before anything can initialise CUDA; inherited by the pool's processes
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["HIP_VISIBLE_DEVICES"] = str(gpu)
    from celery.concurrency import get_available_pool_names
    from celery.utils.nodenames import default_nodename, host_format

    if pool not in get_available_pool_names():
        raise typer.BadParameter(f"--pool {pool!r}: one of {', '.join(get_available_pool_names())}")

    from cli.logs import configure
    from shared.errors import WorkerNameTakenError

    json_lines = not sys.stderr.isatty()
    configure(json_lines=json_lines)
    settings = get_settings()
    _cap_images(settings.max_source_pixels)  # before OpenCV loads: it reads its cap once
    import onnxruntime

    from shared.tasks import worker_queues
    from workers import degradations
    from workers.celery_app import create_app, refuse_duplicate
    from workers.engines.family import detect_family, refused_render_queues

    family = detect_family(settings)
    wanted = queues.split(",") if queues else worker_queues(family)
    providers = onnxruntime.get_available_providers()
    refused, reason = refused_render_queues(family, providers, settings.execution_providers)
    if reason:
        degradations.report("gpu_provider_missing", reason)  # counted before the pool forks: its processes serve it
        err.print(f"[red]gpu_provider_missing[/]: {reason}")
        wanted = [q for q in wanted if q not in refused]
        if not wanted:
            raise typer.Exit(2)
    celery = create_app(settings)
    default_name = f"{family}-{os.getpid()}@%h" if gpu is None else f"{family}-gpu{gpu}-{os.getpid()}@%h"
    nodename = host_format(default_nodename(name or default_name))
    try:
        refuse_duplicate(celery, nodename, timeout=settings.worker_name_check_seconds)
    except WorkerNameTakenError as exc:
        err.print(f"[red]{exc.code}[/]: {exc.message}", soft_wrap=True)
        raise typer.Exit(2) from exc
    # Celery's worker class, as its command line would make it, without building that command line (its command
    # set, 13 % of the import samples of a worker start): the options below are the ones it would be given.
    worker = celery.Worker(
        hostname=nodename,
        queues=wanted,
        concurrency=concurrency or settings.worker_concurrency,
        pool_cls=pool,
        loglevel="INFO",
        quiet=json_lines,  # the banner is text: its facts are logged instead
        without_mingle=True,
        without_gossip=True,
    )
    worker.start()
    if worker.exitcode:
        raise typer.Exit(worker.exitcode)


@app.command()
def doctor(as_json: Annotated[bool, typer.Option("--json", help="Print JSON (for scripts)")] = False) -> None:
    """What this machine offers a worker: accelerator family and devices, torch and ONNX Runtime, ffmpeg's
    hardware codecs, the compile cache, and what will fall back."""
    from cli.output import print_json
    from workers.doctor import diagnose, render

    report = diagnose(get_settings())
    if as_json:
        sections = {name: dict(rows) for name, rows in report.sections.items()}
        print_json({"sections": sections, "warnings": report.warnings, "errors": report.errors})
    else:
        Console().print(render(report))
    if report.errors:
        raise typer.Exit(1)


@app.command()
def beat() -> None:
    """Run the reaper, exactly one per farm: every SWAPFARM_REAP_INTERVAL_SECONDS it re-queues the chunks of
    workers that stopped heartbeating and re-sends the work the broker lost. It keeps no schedule file."""
    from cli.logs import configure
    from workers.reaping import run

    configure()
    run(get_settings())


@app.command()
def flower(
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 5555,
) -> None:
    """Serve Flower, Celery's monitor: workers (named <family>-<pid>@<host>, with their queues) and tasks with
    their job and chunk ids. Basic auth with SWAPFARM_FLOWER_USER / SWAPFARM_FLOWER_PASSWORD (required). Flower
    needs nothing but the broker URL and these: give its process no other secret."""
    from cli.logs import configure
    from shared.broker import make_celery
    from shared.settings import KNOWN_DEFAULT_SECRETS

    configure()
    settings = get_settings()
    password = settings.flower_password.get_secret_value() if settings.flower_password else ""
    problem = None
    if not password or password in KNOWN_DEFAULT_SECRETS:
        problem = "set SWAPFARM_FLOWER_PASSWORD (not a default); Flower never runs without a password"
    elif "," in password or "," in settings.flower_user or ":" in settings.flower_user:
        # Flower reads its basic auth as "user:password,user:password": a ',' would add a login of its own.
        problem = "SWAPFARM_FLOWER_PASSWORD and SWAPFARM_FLOWER_USER may not contain ',' (nor the user ':')"
    if problem:
        err.print(f"[red]settings_invalid[/]: {problem}")
        raise typer.Exit(2)
    # Through Flower's own environment option rather than argv, so the password does not show in `ps`.
    os.environ["FLOWER_BASIC_AUTH"] = f"{settings.flower_user}:{password}"
    make_celery(settings).start(["flower", f"--address={host}", f"--port={port}"])


@db.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument()] = "head",
    worker_role: Annotated[
        str | None,
        typer.Option(help="Then grant this existing role the workers' rights (no access to API keys)"),
    ] = None,
    api_role: Annotated[
        str | None,
        typer.Option(help="Then grant this existing role the API's rights (what it writes; not the schema)"),
    ] = None,
) -> None:
    """Bring the database to the newest schema (Alembic), and grant the workers' and the API's roles their rights."""
    from shared.schema import grant_api_role, grant_worker_role, upgrade

    settings = get_settings()
    upgrade(settings.database_url, revision)
    err.print(f"database at {revision}")
    if worker_role:
        grant_worker_role(settings.database_url, worker_role)
        err.print(f"role {worker_role}: the workers' rights granted")
    if api_role:
        grant_api_role(settings.database_url, api_role)
        err.print(f"role {api_role}: the API's rights granted")


def main() -> None:  # pragma: no cover
    sys.exit(app())
