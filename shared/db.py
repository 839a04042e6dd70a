"""Engines and sessions. One engine per database URL per process, made on first use.

A process keeps the engines of its last few URLs; an older one is disposed (its pooled connections closed), never
just dropped with connections still open.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

_KEPT = 8
_engines: OrderedDict[str, tuple[Engine, sessionmaker[Session]]] = OrderedDict()
_lock = threading.Lock()


def engine_for(url: str) -> Engine:
    """The process-wide engine for ``url`` (SQLite gets WAL and a busy timeout for parallel chunk threads)."""
    return _entry(url)[0]


def dispose_engines() -> None:
    """Close every pooled connection of every engine and forget them (a later call makes new ones)."""
    with _lock:
        kept = list(_engines.values())
        _engines.clear()
    for engine, _ in kept:
        engine.dispose()


def _entry(url: str) -> tuple[Engine, sessionmaker[Session]]:
    with _lock:
        entry = _engines.get(url)
        if entry is not None:
            _engines.move_to_end(url)
            return entry
        engine = _create(url)
        entry = _engines[url] = (engine, sessionmaker(engine, expire_on_commit=False))
        evicted = [_engines.popitem(last=False)[1][0] for _ in range(len(_engines) - _KEPT)]
    for old in evicted:
        old.dispose()
    return entry


def _create(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any exception."""
    session = _entry(url)[1]()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
