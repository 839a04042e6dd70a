"""Load: many small ``passthrough`` jobs submitted at once by concurrent clients, through the whole farm.

Starts a throw-away farm — a new database on the Postgres of ``--pg-admin`` (dropped afterwards), a private Redis
(``redis-server`` on a spare port, unless ``--broker`` names one, which is flushed), the API as a real uvicorn
process (``swapfarm api``), ``--workers`` worker processes and beat — then ``--clients`` threads, each with its own
tenant and API key, submit ``--jobs`` jobs between them over HTTP and wait for every one to end.

Checks that every job succeeded and that none was lost or duplicated (the database holds exactly the submitted
jobs, each with all its chunks done once and one output); prints submit latency p50/p99 and jobs per minute (from
the first submission to the last job's end). A report, not a timed test.

    .venv/bin/python -m benchmarks.load [--jobs 200] [--clients 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from sqlalchemy import func, select

from shared.db import engine_for, session_scope
from shared.models import Chunk, Job
from shared.schema import upgrade
from shared.tenants import create_key, ensure_tenant

FINISHED = {"succeeded", "failed", "cancelled"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


@contextmanager
def throwaway_database(admin_url: str) -> Iterator[str]:
    name = f"swapfarm_load_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = admin_url.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    try:
        upgrade(url)
        yield url
    finally:
        engine_for(url).dispose()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def private_redis(folder: Path) -> Iterator[str]:
    port = free_port()
    with (folder / "redis.log").open("ab") as log:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        wait_until(lambda: redis.Redis.from_url(url).ping(), "redis")
        yield url
    finally:
        proc.terminate()
        proc.wait()


class Processes:
    """The farm's processes (``python -m cli …``), each leading its own process group, logs in ``folder``."""

    def __init__(self, env: dict[str, str], folder: Path) -> None:
        self.env, self.folder = env, folder
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str) -> None:
        with (self.folder / f"{name}.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "cli", *args],
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()


def make_clip(path: Path) -> None:
    subprocess.run(
        ["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=160x90:rate=30:duration=1",
         "-f", "lavfi", "-i", "sine=duration=1", "-c:v", "libx264", "-preset", "veryfast", "-pix_fmt", "yuv420p",
         "-c:a", "aac", "-shortest", str(path)],
        check=True,
    )  # fmt: skip


def client(api: str, key: str, clip: bytes, count: int, ids: list[str], latencies: list[float]) -> None:
    """Submit ``count`` jobs one after another, as one user's script would."""
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        for _ in range(count):
            started = time.perf_counter()
            response = http.post(
                "/v1/jobs",
                files={"target": ("clip.mp4", clip, "video/mp4")},
                data={"options": '{"processors": ["passthrough"]}'},
            )
            latencies.append(time.perf_counter() - started)
            if response.status_code != 202:
                raise SystemExit(f"submission refused: {response.status_code} {response.text}")
            ids.append(response.json()["id"])


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--broker", default=None, help="a Redis URL to use (flushed); default: a private redis")
    parser.add_argument("--timeout", type=float, default=1800, help="give up waiting for the jobs after this")
    args = parser.parse_args()

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="swapfarm-load-")))
        database_url = stack.enter_context(throwaway_database(args.pg_admin))
        if args.broker:
            redis.Redis.from_url(args.broker).flushdb()
            broker_url = args.broker
        else:
            broker_url = stack.enter_context(private_redis(tmp))
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPFARM_")}
        env |= {
            "SWAPFARM_DATABASE_URL": database_url,
            "SWAPFARM_BROKER_URL": broker_url,
            "SWAPFARM_STORAGE_URL": f"file://{tmp / 'storage'}",
            "SWAPFARM_WORK_DIR": str(tmp / "work"),
            "SWAPFARM_FAMILY": "cpu",
        }
        farm = Processes(env, tmp)
        stack.callback(farm.stop)
        farm.start("api", "api", "--port", str(port))
        for i in range(args.workers):
            farm.start(f"worker-{i}", "worker", "--name", f"load-{i}@%h", "--concurrency", "1")
        farm.start("beat", "beat")
        api = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{api}/readyz", timeout=5).status_code == 200, "the API")

        keys = []
        with session_scope(database_url) as session:
            for i in range(args.clients):
                ensure_tenant(session, f"load-{i}")
                keys.append(create_key(session, f"load-{i}").key)
        clip = tmp / "clip.mp4"
        make_clip(clip)
        data = clip.read_bytes()

        ids: list[str] = []
        latencies: list[float] = []
        shares = [args.jobs // args.clients + (i < args.jobs % args.clients) for i in range(args.clients)]
        threads = [
            threading.Thread(target=client, args=(api, key, data, share, ids, latencies))
            for key, share in zip(keys, shares, strict=True)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        submitted = time.perf_counter() - started

        def all_finished() -> bool:
            with session_scope(database_url) as session:
                statuses = session.scalars(select(Job.status)).all()
            return len(statuses) >= len(ids) and all(s in FINISHED for s in statuses)

        wait_until(all_finished, "every job to end", timeout=args.timeout)
        with session_scope(database_url) as session:
            last_end = session.scalar(select(func.max(Job.finished_at)))
            first_start = session.scalar(select(func.min(Job.created_at)))
            jobs = {job.id: job for job in session.scalars(select(Job))}
            chunks = session.execute(
                select(Chunk.job_id, func.count(), func.sum(Chunk.attempts)).group_by(Chunk.job_id)
            ).all()
        assert last_end is not None and first_start is not None
        elapsed = (last_end - first_start).total_seconds()
        storage = tmp / "storage" / "jobs"
        outputs = sum((storage / job_id / "output.mp4").is_file() for job_id in jobs)

    failed = {job_id: (job.error_code, job.error_message) for job_id, job in jobs.items() if job.status != "succeeded"}
    lost = set(ids) - set(jobs)
    extra = set(jobs) - set(ids)
    recounted = [j for j in jobs.values() if j.chunks_done != j.chunks_total or j.frames_done != j.frames_total]
    attempts = sum(int(row[2]) for row in chunks)
    print(f"{args.jobs} jobs (1 s, 160x90, passthrough), {args.clients} clients, {args.workers} workers")
    print(f"submitted          : {len(ids)} in {submitted:.1f} s, {len(set(ids))} distinct ids")
    print(f"succeeded          : {len(jobs) - len(failed)} / {len(ids)}   failed: {len(failed)}")
    print(f"lost / duplicated  : {len(lost)} / {len(extra) + len(ids) - len(set(ids))}   outputs: {outputs}")
    print(f"chunks             : {sum(int(row[1]) for row in chunks)}, render attempts {attempts}")
    p50, p99, mean = (
        1000 * percentile(latencies, 0.5),
        1000 * percentile(latencies, 0.99),
        1000 * statistics.mean(latencies),
    )
    print(f"submit latency     : p50 {p50:.0f} ms   p99 {p99:.0f} ms   (mean {mean:.0f} ms)")
    print(f"throughput         : {len(jobs) / elapsed * 60:.1f} jobs/minute ({elapsed:.1f} s, first submit → last end)")
    problems = failed or lost or extra or recounted or len(set(ids)) != len(ids) or outputs != len(ids)
    if problems:
        raise SystemExit(f"NOT OK: failed {list(failed.items())[:5]}, lost {lost}, extra {extra}, {recounted=}")


if __name__ == "__main__":
    main()
