"""Jobs' targets, fetched once per worker process and shared by the chunks it renders.

Every chunk of a job reads the same target. On local storage that is the file itself; on S3 each chunk used to
download the whole video again. A worker process now keeps the targets it fetched (the ``keep`` most recently
used, under ``<work_dir>/targets``) and hands the same local copy to every chunk of the job, across tasks. A
copy in use is never deleted; one pushed out of the cache is deleted once its last user is done. Inputs are never
rewritten under the same URL (a job's files are named by its id), so a cached copy cannot go stale.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from shared.storage import Storage

logger = logging.getLogger(__name__)


@dataclass
class _Entry:
    path: Path
    ready: threading.Event = field(default_factory=threading.Event)
    users: int = 0
    failed: BaseException | None = None


class TargetCache:
    """Local copies of remote targets, by URL, at most ``keep`` of them (plus those still in use)."""

    def __init__(self, keep: int = 2) -> None:
        self._keep = keep
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.downloads = 0  # how many targets this process fetched (for its log and tests)

    @contextmanager
    def local(self, storage: Storage, url: str, scratch: Path) -> Iterator[Path]:
        """A local path holding the target at ``url``: the file itself when local, else this process's copy,
        downloaded by the first caller while later ones wait for it.

        Raises:
            OSError, and what the storage raises: the download failed (the next caller tries again).
        """
        if storage.is_local(url):
            with storage.local_copy(url, scratch) as path:
                yield path
            return
        with self._lock:
            entry = self._entries.get(url)
            fetch = entry is None or (entry.ready.is_set() and (entry.failed is not None or not entry.path.exists()))
            if fetch:
                name = hashlib.sha256(url.encode()).hexdigest()[:16] + "-" + url.rsplit("/", 1)[-1]
                entry = _Entry(scratch / "targets" / name)
                self._entries[url] = entry
            assert entry is not None
            entry.users += 1
            self._entries.move_to_end(url)
        try:
            if fetch:
                self._fetch(storage, url, entry)
            entry.ready.wait()
            if entry.failed is not None:
                raise entry.failed
            yield entry.path
        finally:
            with self._lock:
                entry.users -= 1
                self._evict()

    def _fetch(self, storage: Storage, url: str, entry: _Entry) -> None:
        try:
            storage.download(url, entry.path)
            self.downloads += 1
            logger.info("fetched target %s for this process", entry.path.name)
        except BaseException as exc:
            entry.failed = exc
            raise
        finally:
            entry.ready.set()

    def _evict(self) -> None:
        """Drop the copies older than the ``keep`` most recently used that nobody reads (under the lock)."""
        older = list(self._entries)[: max(0, len(self._entries) - self._keep)]
        for url in older:
            entry = self._entries[url]
            if entry.users == 0 and entry.ready.is_set():
                del self._entries[url]
                entry.path.unlink(missing_ok=True)
