"""Recovery times: how much later a job ends when the broker or a worker fails during it, next to a clean run.

A farm as README's "Run the farm" starts it — the API (``swapfarm api``), two workers and ``swapfarm beat``, a
private Redis on a spare port, a throw-away database on the Postgres of ``--pg-admin`` — runs the same job (by
default ``face_blur`` on the reference clip ``crowd_1080p.mp4`` in 15-frame chunks, the trial of the issue) once
per scenario, each on a fresh farm:

* ``clean``: nothing goes wrong;
* ``redis-20s``: Redis (no persistence) stopped for ``--outage`` seconds once 30 frames are done, started empty;
* ``submit-down``: the job submitted while Redis is down, Redis started ``--outage`` seconds later;
* ``kill``: one worker of two SIGKILLed while it renders a chunk (default lease and heartbeat);
* ``aof``: Redis with an append-only file restarted once 30 frames are done.

Prints per scenario the job's wall time, the delay over the clean run, and the recovery events' times (when the
broker came back, when lost work was re-sent, when the job's work started again, when a killed worker's chunk was
re-queued), with the figures the issue measured before this recovery existed. A report, not a timed test.

    .venv/bin/python -m benchmarks.recovery [--scenarios clean,redis-20s,submit-down,kill,aof] [--outage 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from benchmarks.load import Processes, free_port, throwaway_database, wait_until
from shared.db import session_scope
from shared.models import Chunk, Job, JobEvent
from shared.tenants import create_key
from tests.support.servers import RedisServer

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FINISHED = {"succeeded", "failed", "cancelled"}
# What the trial measured before this recovery existed (face_blur, crowd_1080p.mp4, 15-frame chunks).
BEFORE = {
    "redis-20s": "325 s to finish (clean 18 s); frozen for 5 minutes",
    "submit-down": "queued 5 min 12 s",
    "kill": "76 s to finish (clean 18 s), 24 s with a 20 s lease; re-queued after the 60 s lease + reap",
}


@dataclass
class Outcome:
    scenario: str
    seconds: float = 0.0  # submission to success
    marks: dict[str, float] = field(default_factory=dict)  # fault times, seconds after submission
    events: dict[str, float] = field(default_factory=dict)  # first event of each kind, seconds after submission
    resent: list[str] = field(default_factory=list)
    attempts: int = 0
    chunks: int = 0
    status: str = ""


def _now() -> float:
    return time.time()


@contextmanager
def farm(args: argparse.Namespace, tmp: Path, database_url: str, appendonly: bool) -> Iterator[tuple[Any, ...]]:
    """A fresh farm: Redis, the API, two workers, the reaper. Yields (api url, key, redis, processes)."""
    folder = Path(tempfile.mkdtemp(prefix="farm-", dir=tmp))
    redis = RedisServer(folder / "redis.log", appendonly=appendonly)
    redis.start()
    models = folder / "models"
    models.mkdir()
    yunet = DATA / "models" / "yunet_2023mar.onnx"
    if yunet.exists():
        (models / "yunet_2023_mar.onnx").symlink_to(yunet)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPFARM_")}
    env |= {
        "SWAPFARM_DATABASE_URL": database_url,
        "SWAPFARM_BROKER_URL": redis.url,
        "SWAPFARM_STORAGE_URL": f"file://{folder / 'storage'}",
        "SWAPFARM_WORK_DIR": str(folder / "work"),
        "SWAPFARM_FAMILY": "cpu",
        "SWAPFARM_MODELS_DIR": str(models),
    }
    procs = Processes(env, folder)
    port = free_port()
    try:
        procs.start("api", "api", "--port", str(port))
        procs.start("w1", "worker", "--name", "w1@%h", "--concurrency", "1")
        procs.start("w2", "worker", "--name", "w2@%h", "--concurrency", "1")
        procs.start("beat", "beat")
        api = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{api}/readyz", timeout=5).status_code == 200, "the API")
        for name in ("w1", "w2"):
            wait_until(lambda name=name: " ready." in (folder / f"{name}.log").read_text(), f"worker {name}", 120)
        with session_scope(database_url) as session:
            key = create_key(session, f"bench-{folder.name.lower()}"[:64]).key
        yield api, key, redis, procs, folder
    finally:
        procs.stop()
        redis.stop()


def submit(api: str, key: str, clip: Path, options: str) -> str:
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
        response = http.post(
            "/v1/jobs", files={"target": (clip.name, clip.read_bytes(), "video/mp4")}, data={"options": options}
        )
    if response.status_code != 202:
        raise SystemExit(f"submission refused: {response.status_code} {response.text}")
    return str(response.json()["id"])


def frames_done(database_url: str, job_id: str) -> int:
    with session_scope(database_url) as session:
        chunks = session.scalars(select(Chunk).where(Chunk.job_id == job_id)).all()
    return sum(c.frame_count for c in chunks if c.status == "done")


def finish(database_url: str, job_id: str, started: float, outcome: Outcome, timeout: float) -> Outcome:
    def ended() -> bool:
        with session_scope(database_url) as session:
            return session.get_one(Job, job_id).status in FINISHED

    wait_until(ended, "the job to end", timeout=timeout)
    with session_scope(database_url) as session:
        job = session.get_one(Job, job_id)
        events = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)).all()
        chunks = session.scalars(select(Chunk).where(Chunk.job_id == job_id)).all()
    assert job.finished_at is not None
    outcome.status = job.status
    outcome.seconds = job.finished_at.timestamp() - started
    for event in events:
        outcome.events.setdefault(str(event.kind), event.at.timestamp() - started)
        if event.kind == "resent":
            outcome.resent.append(event.message)
    outcome.chunks, outcome.attempts = len(chunks), sum(c.attempts for c in chunks)
    return outcome


def first_start_after(database_url: str, job_id: str, after: float) -> float | None:
    """When the job's next step started after ``after`` (epoch seconds): a plan or chunk claimed."""
    with session_scope(database_url) as session:
        found = session.scalar(
            select(JobEvent.at)
            .where(JobEvent.job_id == job_id, JobEvent.kind.in_(("planning", "chunk_started")))
            .where(JobEvent.at > datetime.fromtimestamp(after, UTC))
            .order_by(JobEvent.id)
            .limit(1)
        )
    return found.timestamp() if found is not None else None


def run(scenario: str, args: argparse.Namespace, tmp: Path, database_url: str) -> Outcome:
    outcome = Outcome(scenario)
    clip, options = args.clip, args.options
    with farm(args, tmp, database_url, appendonly=scenario == "aof") as (api, key, redis, procs, folder):
        if scenario == "submit-down":
            redis.stop()
            started = _now()
            job_id = submit(api, key, clip, options)
            outcome.marks["accepted"] = _now() - started
            time.sleep(max(0.0, started + args.outage - _now()))
            redis.start()
            back = _now()
            outcome.marks["redis back"] = back - started
            finish(database_url, job_id, started, outcome, args.timeout)
            restart = first_start_after(database_url, job_id, back)
            if restart is not None:
                outcome.marks["started again"] = restart - started
            return outcome
        started = _now()
        job_id = submit(api, key, clip, options)
        if scenario in {"redis-20s", "aof"}:
            wait_until(lambda: frames_done(database_url, job_id) >= 30, "30 frames done", args.timeout)
            redis.stop()
            outcome.marks["redis stopped"] = _now() - started
            if scenario == "redis-20s":
                time.sleep(args.outage)
            redis.start()
            back = _now()
            outcome.marks["redis back"] = back - started
            finish(database_url, job_id, started, outcome, args.timeout)
            restart = first_start_after(database_url, job_id, back)
            if restart is not None:
                outcome.marks["started again"] = restart - started
        elif scenario == "kill":

            def running_on_w1() -> bool:
                with session_scope(database_url) as session:
                    chunks = session.scalars(select(Chunk).where(Chunk.job_id == job_id)).all()
                return any(c.status == "running" and str(c.worker).startswith("w1@") and c.frames_done for c in chunks)

            wait_until(running_on_w1, "a chunk rendering on w1", args.timeout)
            w1 = next(p for p in procs.procs if "w1@" in " ".join(map(str, p.args)))
            os.killpg(w1.pid, signal.SIGKILL)
            outcome.marks["killed"] = _now() - started
            finish(database_url, job_id, started, outcome, args.timeout)
        else:
            finish(database_url, job_id, started, outcome, args.timeout)
    return outcome


def report(outcomes: list[Outcome]) -> None:
    clean = next((o.seconds for o in outcomes if o.scenario == "clean"), None)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores shared)")
    for o in outcomes:
        delay = (
            f", {o.seconds - clean:+.1f} s over the clean run" if clean is not None and o.scenario != "clean" else ""
        )
        print(f"\n{o.scenario}: {o.status} in {o.seconds:.1f} s{delay}; {o.chunks} chunks, {o.attempts} attempts")
        for name, at in o.marks.items():
            print(f"  {name:<22} {at:7.1f} s")
        for kind in ("broker_unreachable", "resent", "chunk_requeued", "planning", "succeeded"):
            if kind in o.events:
                print(f"  event {kind:<16} {o.events[kind]:7.1f} s")
        if "redis back" in o.marks and "started again" in o.marks:
            print(
                f"  -> work started again {o.marks['started again'] - o.marks['redis back']:.1f} s after Redis was back"
            )
        if "killed" in o.marks and "chunk_requeued" in o.events:
            print(f"  -> chunk re-queued {o.events['chunk_requeued'] - o.marks['killed']:.1f} s after the kill")
        for message in o.resent:
            print(f"  resent: {message}")
        if o.scenario in BEFORE:
            print(f"  before this work (the issue's trial): {BEFORE[o.scenario]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default="clean,redis-20s,submit-down,kill,aof")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds Redis stays down")
    parser.add_argument("--clip", type=Path, default=DATA / "media" / "crowd_1080p.mp4")
    parser.add_argument("--processor", default="face_blur")
    parser.add_argument("--chunk-frames", type=int, default=15)
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--timeout", type=float, default=900)
    args = parser.parse_args()
    args.options = f'{{"processors": ["{args.processor}"], "chunk_frames": {args.chunk_frames}}}'
    if not args.clip.exists():
        raise SystemExit(f"no clip at {args.clip} (the reference data folder sits beside the checkout)")
    print(f"{args.processor} on {args.clip.name} in {args.chunk_frames}-frame chunks; two workers, the reaper")
    outcomes = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="swapfarm-recovery-")))
        database_url = stack.enter_context(throwaway_database(args.pg_admin))
        for scenario in args.scenarios.split(","):
            print(f"running {scenario} …", flush=True)
            outcomes.append(run(scenario, args, tmp, database_url))
    report(outcomes)


if __name__ == "__main__":
    main()
