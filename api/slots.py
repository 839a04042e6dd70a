"""Per-key caps on long requests: uploads in progress and open event streams, counted per API process.

A key at its cap gets a 429 with a stable code (``too_many_uploads``, ``too_many_streams``) instead of holding
more of the server's connections, threads and disk. Counts live in the process: with ``--workers N`` a key may hold
N times the cap across the server — a bound, which is what protects each process.
"""

from __future__ import annotations

import threading
from collections import Counter
from types import TracebackType

from shared.errors import TooManyRequestsError

__all__ = ["KeySlots", "Slot"]


class Slot:
    """One place taken; :meth:`release` (idempotent) gives it back."""

    def __init__(self, owner: KeySlots, key: str) -> None:
        self._owner, self._key, self._held = owner, key, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._owner._give_back(self._key)

    def __enter__(self) -> Slot:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class KeySlots:
    """At most ``limit`` places per key at once.

    >>> slots = KeySlots(1, code="too_many_streams", what="event streams")
    >>> first = slots.take("k")
    >>> slots.take("k")
    Traceback (most recent call last):
    ...
    shared.errors.TooManyRequestsError: too_many_streams: this API key has 1 event streams open, the most allowed
    >>> first.release(); slots.take("k").release(); slots.held("k")
    0
    """

    def __init__(self, limit: int, *, code: str, what: str) -> None:
        self.limit, self.code, self.what = limit, code, what
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, key: str) -> Slot:
        """Take a place for ``key``.

        Raises:
            TooManyRequestsError: the key holds ``limit`` places already.
        """
        with self._lock:
            if self._held[key] >= self.limit:
                raise TooManyRequestsError(
                    f"this API key has {self._held[key]} {self.what} open, the most allowed", code=self.code
                )
            self._held[key] += 1
        return Slot(self, key)

    def held(self, key: str) -> int:
        with self._lock:
            return self._held[key]

    def _give_back(self, key: str) -> None:
        with self._lock:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]
