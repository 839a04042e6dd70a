"""What chunk heartbeats cost Postgres: the numbers behind the lease and heartbeat defaults.

Every rendering worker extends its chunk's lease every ``SWAPFARM_HEARTBEAT_SECONDS`` with one conditional UPDATE
(``shared.jobs.heartbeat``, through a pooled session exactly as a worker sends it). This benchmark claims
``--chunks`` chunks in a throw-away database, then beats them from ``--threads`` threads as fast as they go for
``--seconds``, and measures per heartbeat: the client's round-trip latency, the Postgres server's CPU time (summed
over every ``postgres`` process, from /proc) and the WAL it writes. From those it prints what a farm of
``--workers`` workers costs at several heartbeat intervals: writes per second, server CPU cores, WAL per second.

    .venv/bin/python -m benchmarks.heartbeat [--seconds 20] [--threads 4] [--workers 1000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

import psycopg
from sqlalchemy import text

from benchmarks.load import throwaway_database
from shared import jobs
from shared.db import engine_for, session_scope
from tests.support.rows import planned_job

_TICKS = os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """User + system CPU time of every process named ``postgres`` on this machine."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        if name != "postgres":
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / _TICKS


def wal_bytes(url: str) -> int:
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def running_chunks(url: str, count: int) -> list[jobs.ChunkClaim]:
    _, ids = planned_job(url, count, lease_seconds=600)
    claims = []
    with session_scope(url) as s:
        for chunk_id in ids:
            claim = jobs.claim_chunk(s, chunk_id, worker="bench@host", family="cpu", lease_seconds=600)
            assert claim is not None
            claims.append(claim)
    return claims


def beat(url: str, claims: list[jobs.ChunkClaim], until: float, latencies: list[float]) -> None:
    i = 0
    while time.monotonic() < until:
        claim = claims[i % len(claims)]
        started = time.perf_counter()
        with session_scope(url) as s:
            assert jobs.heartbeat(s, claim, i, 600)
        latencies.append(time.perf_counter() - started)
        i += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=1000, help="running chunks, beaten round-robin")
    parser.add_argument("--workers", type=int, default=1000, help="the farm size to project to")
    parser.add_argument("--pg-admin", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()

    with throwaway_database(args.pg_admin) as url:
        claims = running_chunks(url, args.chunks)
        with engine_for(url).connect() as conn:
            settings = {
                name: conn.execute(text(f"SHOW {name}")).scalar()
                for name in ("synchronous_commit", "fsync", "shared_buffers")
            }
        shares = [claims[i :: args.threads] for i in range(args.threads)]
        latencies: list[list[float]] = [[] for _ in shares]
        cpu_before, wal_before = postgres_cpu_seconds(), wal_bytes(url)
        started = time.monotonic()
        until = started + args.seconds
        threads = [
            threading.Thread(target=beat, args=(url, share, until, out))
            for share, out in zip(shares, latencies, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        cpu = postgres_cpu_seconds() - cpu_before
        wal = wal_bytes(url) - wal_before

    flat = sorted(x for share in latencies for x in share)
    count = len(flat)
    per_write_cpu = cpu / count
    per_write_wal = wal / count
    load = os.getloadavg()
    print(f"postgres: {settings}; load average before the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"heartbeats : {count} in {elapsed:.1f} s from {args.threads} threads = {count / elapsed:.0f}/s "
        f"(the most this machine took, sharing its cores with the client)"
    )
    print(
        f"latency    : p50 {1000 * statistics.median(flat):.2f} ms   p99 {1000 * flat[int(0.99 * (count - 1))]:.2f} ms"
    )
    print(f"per write  : {1000 * per_write_cpu:.3f} ms of Postgres CPU, {per_write_wal:.0f} bytes of WAL")
    print(f"{args.workers} workers, each beating every:")
    for interval in (1.0, 3.0, 5.0, 10.0):
        rate = args.workers / interval
        share = 100 * rate / (count / elapsed)
        print(
            f"  {interval:>4.0f} s : {rate:6.0f} writes/s   {rate * per_write_cpu:5.2f} Postgres cores   "
            f"{rate * per_write_wal / 1024:7.0f} KiB/s WAL   {share:5.1f}% of the rate measured"
        )


if __name__ == "__main__":
    main()
