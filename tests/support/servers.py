"""Private Redis and Postgres servers that a fault test may stop and start, on spare loopback ports.

The machine's shared servers (Postgres on 5432, Redis on 6379) serve every test run at once and are never stopped;
a test that takes a server away starts its own with these classes. Both keep nothing across a restart that the
test does not mean them to keep: Redis runs without persistence unless told (a restart comes back empty, as a
broker without a disk does), Postgres keeps its data directory (a restart is a database that went away and came
back).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import psycopg
import redis

from tests.support.farm import wait_for
from tests.support.services import free_port


class RedisServer:
    """``redis-server`` on a spare port. Without persistence (the default) every start is an empty broker; with
    ``appendonly`` it writes every command to an append-only file in the log's folder and a restart comes back with
    what it held."""

    def __init__(self, log: Path, *, appendonly: bool = False) -> None:
        self.port = free_port()
        self.log = log
        self.appendonly = appendonly
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else ["--appendonly", "no"]
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", *persistence]
        args += ["--dir", str(self.log.parent), "--appendfilename", f"redis-{self.port}.aof"] if self.appendonly else []
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, cwd=self.log.parent)
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _answers(client), timeout=30, what=f"redis on port {self.port}")

    def stop(self) -> None:
        """Stop the server; with no persistence, whatever it held is gone."""
        if self._proc is None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def _postgres_bin(name: str) -> str:
    """A server binary of the newest Postgres installed (``pg_ctl`` on PATH may be a wrapper)."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        raise FileNotFoundError(f"no /usr/lib/postgresql/*/bin/{name}")
    return found[-1]


class PostgresServer:
    """A Postgres cluster of its own (``initdb`` into a temporary folder), trusting local connections.

    ``initdb`` and ``postgres`` refuse to run as root, so as root they run as the ``postgres`` OS user.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="swapfarm-pg-"))
        self.data = self.home / "data"
        self.log = self.home / "postgres.log"
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres", "postgres")
        self._run(_postgres_bin("initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def _run(self, *args: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *args], check=True, capture_output=True, timeout=120)

    def url(self, database: str = "postgres", driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.home} -c fsync=off"
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start")

    def stop(self) -> None:
        """Stop at once (``-m fast``): open connections are cut, as when the server goes away."""
        self._run(_postgres_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(driver="postgresql"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def remove(self) -> None:
        """Stop the server if it runs and delete its files."""
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop()
            except subprocess.CalledProcessError:
                pass
        shutil.rmtree(self.home, ignore_errors=True)
