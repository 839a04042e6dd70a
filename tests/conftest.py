"""Fixtures: a throw-away Postgres database migrated by Alembic, a Redis database, settings, test media."""

from __future__ import annotations

import ctypes
import gc
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from sqlalchemy import update

from shared.db import session_scope
from shared.models import Chunk, Job, utcnow
from shared.schema import upgrade
from shared.settings import Settings
from shared.states import ACTIVE_JOB_STATES, ChunkStatus, JobStatus
from tests.support.data import DATA
from tests.support.media import make_clip
from tests.support.tenants import make_key

PG_ADMIN = os.environ.get("SWAPFARM_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE = os.environ.get("SWAPFARM_TEST_REDIS", "redis://127.0.0.1:6379")
# One Redis database per concurrent test run (tests flush it); 11 unless told otherwise.
REDIS_DB = int(os.environ.get("SWAPFARM_TEST_REDIS_DB", "11"))
# Set in each process of a pytest-xdist run (gw0, gw1 …): such a process brings its own Redis server.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")

# Where the environment turns bytecode caching off, every process a test starts (workers, API servers, the CLI) would
# compile the project from source again, and every pytest process rewrite every test module's asserts again.
# scripts/test unsets the variable before pytest starts; a plain pytest command (the inner loop's) gets the same here,
# before any test module is collected.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# Inductor probes, once in each process and compile cache folder, which vector instruction sets the C++ compiler
# can build (three g++ builds and a Python child each): 6.5 CPU-s in every pytest process and every worker that
# compiles, for nothing a test proves, since the suite gives each module a fresh cache. Set to 1, Inductor takes
# the sets the CPU's flags list (the same sets the probes found on the suite's machines, docs/testing.md); a run
# that must see the probes sets it to 0.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

# SWAPFARM_TEST_PROFILE=FILE writes a per-test wall and CPU profile (tests/support/cpu_profile.py).
pytest_plugins = ["tests.support.cpu_profile"]

_COMPILE_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """The compile cache of every test that does not name its own: a folder of this pytest process, removed at its
    end, never the user's (``~/.cache/swapfarm/torch-compile`` by default, where the suite's engine trials, memory
    notes and compiled kernels would otherwise be kept from one run to the next and change what the next run does).
    Worker processes a test starts get it through their settings or the environment."""
    folder = tempfile.mkdtemp(prefix="swapfarm-test-compile-")
    config.stash[_COMPILE_CACHE] = folder
    os.environ["SWAPFARM_TORCH_COMPILE_CACHE_DIR"] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_COMPILE_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    name = f"swapfarm_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    upgrade(url)
    yield url
    from shared.db import dispose_engines

    dispose_engines()
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(autouse=True)
def _process_degradations_kept_to_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sticky degradation (a provider fallback) concerns every later job of the process that hit it: one a test
    provokes in this process must not land on the jobs of the next test run here (pytest-xdist mixes modules)."""
    from workers import degradations

    monkeypatch.setattr(degradations, "_sticky", {})


RELEASE_ABOVE_BYTES = (6 if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) <= 2 else 4) * 2**30
"""A pytest process that holds more than this at a module's end releases its models (see below): 6 GiB where at
most two pytest processes run, 4 GiB where three or more share the machine's memory."""


@pytest.fixture(autouse=True, scope="module")
def _models_released_when_the_process_grows() -> Iterator[None]:
    """A pytest process runs module after module, and a worker keeps every model it loads: left alone, one process
    of the suite grew to 12.7 GB of resident memory over the unit tests. So at the end of a module, once the process
    holds more than :data:`RELEASE_ABOVE_BYTES`, its models, ONNX Runtime sessions and compiled graphs are released;
    the next module that needs one loads it again (its compiled code from the compile cache). Releasing after every
    module instead bounded a process at 5 GB, but the suite ran 80 s longer (docs/testing.md)."""
    yield
    if "workers.engines.trials" in sys.modules:  # a trial a module's short job left running stops with the module
        from workers.engines.trials import stop_trials

        stop_trials()
    if "workers.engines.loading" not in sys.modules:
        return
    resident = _resident_bytes()
    if resident is not None and resident < RELEASE_ABOVE_BYTES:
        return
    from workers.engines.loading import release_models
    from workers.faces.device_detection import forget_converted

    release_models()
    forget_converted()
    if "torch" in sys.modules:
        import torch

        torch._dynamo.reset()  # compiled graphs and their guards, per process
    gc.collect()
    _return_freed_memory()


def _resident_bytes() -> int | None:
    """This process's resident memory, where ``/proc`` tells it."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def _return_freed_memory() -> None:
    """glibc keeps freed heap for reuse; hand what it can back to the system, so the next process has it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@pytest.fixture(autouse=True)
def _no_live_work_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that used the database, cancel the work it left unfinished (its processes are stopped by
    then): render messages are tokens any worker of the family may spend on any queued chunk
    (``shared.fairness``), so a test's leftovers would otherwise be claimed by the next test's workers."""
    if "database_url" not in request.fixturenames:
        yield
        return
    # Asked for before the test runs, so that it is torn down after this (a test may bring its own database).
    url = request.getfixturevalue("database_url")
    yield
    with session_scope(url) as session:
        live = (ChunkStatus.QUEUED, ChunkStatus.RUNNING)
        session.execute(
            update(Chunk)
            .where(Chunk.status.in_(live))
            .values(status=ChunkStatus.CANCELLED, lease_token=None, lease_expires_at=None)
        )
        session.execute(
            update(Job)
            .where(Job.status.in_((*ACTIVE_JOB_STATES, JobStatus.WAITING)))
            .values(status=JobStatus.CANCELLED, finished_at=utcnow(), lease_token=None, lease_expires_at=None)
        )


@pytest.fixture(scope="session")
def broker_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's Redis database (tests flush it). In a pytest-xdist run each worker process starts a Redis
    server of its own on a spare port (a few MB, started in milliseconds): the machine's server has only 16
    databases, shared by every run on it, and two workers flushing one database would drop each other's work."""
    if XDIST_WORKER is None:
        url = f"{REDIS_BASE}/{REDIS_DB}"
        redis.Redis.from_url(url).flushdb()
        yield url
        return
    from tests.support.servers import RedisServer

    server = RedisServer(tmp_path_factory.mktemp(f"redis-{XDIST_WORKER}") / "redis.log")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def farm_settings(database_url: str, broker_url: str, folder: Path, **overrides: Any) -> Settings:
    """Settings for a test's farm: storage and work under ``folder``, short leases, heartbeats and reaps, the
    Redis database emptied; ``overrides`` on top (a module's upload limits, its models folder)."""
    redis.Redis.from_url(broker_url).flushdb()
    values: dict[str, Any] = {
        "environment": "test",
        "database_url": database_url,
        "broker_url": broker_url,
        "storage_url": f"file://{folder / 'storage'}",
        "work_dir": folder / "work",
        "lease_seconds": 4,
        "heartbeat_seconds": 1,
        "reap_interval_seconds": 1,
        "requeue_after_seconds": 30,
        "retry_backoff_seconds": 0.2,
        "batch_size": 8,
        "worker_name_check_seconds": 0.25,  # a worker's start waits this long for a namesake (1 s by default)
    }
    return Settings(**(values | overrides))


@pytest.fixture(scope="module")
def module_settings(database_url: str, broker_url: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The settings every test of a ``shared_farm`` module runs under (one storage and work folder), so that they
    can share the farm's processes (``tests/support/farm_pool.py``)."""
    return farm_settings(database_url, broker_url, tmp_path_factory.mktemp("module"))


@pytest.fixture
def settings(request: pytest.FixtureRequest, database_url: str, broker_url: str, tmp_path: Path) -> Settings:
    """A test's settings: its own storage and work folder, the Redis database emptied; in a module marked
    ``shared_farm``, the module's."""
    if request.node.get_closest_marker("shared_farm"):
        return request.getfixturevalue("module_settings")  # type: ignore[no-any-return]
    return farm_settings(database_url, broker_url, tmp_path)


@pytest.fixture
def api_key(settings: Settings) -> str:
    """An API key of a fresh tenant (no practical limit on its jobs at once)."""
    return make_key(settings)


@pytest.fixture(scope="session")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="session")
def clip_30s(media_dir: Path) -> Path:
    return make_clip(media_dir / "moving-30s.mp4", seconds=30)


@pytest.fixture(scope="session")
def clip_short(media_dir: Path) -> Path:
    return make_clip(media_dir / "short.mp4", seconds=4)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.exists():
        pytest.skip("the reference data folder is not beside the checkout")
    return DATA
