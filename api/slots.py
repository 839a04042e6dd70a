"""Per-key caps on long requests: uploads in progress and open event streams, counted in Redis across every API
process and replica.

A key at its cap gets a 429 with a stable code (``too_many_uploads``, ``too_many_streams``) instead of holding
more of the farm's connections, threads and disk. Each place is a member of a sorted set per key and cap
(``swapfarm:slots:<code>:<key id>``) scored by when it expires: the process holding it pushes that forward every
third of ``slot_ttl_seconds`` while the request runs and removes it when the request ends, so the places of an API
process that died (killed, its host lost) come free within ``slot_ttl_seconds``. Taking a place is one Lua script
(drop the expired, count, add), so two processes racing for the last place cannot both get it; times are Redis's
own clock, so hosts whose clocks disagree agree on expiry. Redis is called through the synchronous client, off the
event loop (a worker thread): its connections belong to no event loop, so a finalizer may give a place back too.

While Redis does not answer (the broker is away: Postgres still takes jobs, and the reaper sends them once it is
back), a process counts its own places instead, to the same limit: the cap then holds per process, not per farm.
Each such place is a warning in the log and one more ``swapfarm_api_slot_fallbacks_total{cap}``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from prometheus_client import Counter
from redis import Redis
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from shared.errors import TooManyRequestsError

__all__ = ["KeySlots", "Slot", "fallback_counter"]

logger = logging.getLogger(__name__)


def fallback_counter(registry: Any) -> Counter:
    """``swapfarm_api_slot_fallbacks_total{cap}``: places counted by one process because Redis did not answer."""
    return Counter(
        "swapfarm_api_slot_fallbacks",
        "Upload or stream places counted by this API process alone, Redis not answering",
        ["cap"],
        registry=registry,
    )


# KEYS[1]: the key's set; ARGV: limit, member, ttl (ms). Returns the places held after, or -1 when full.
_TAKE = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return -1 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return redis.call('ZCARD', KEYS[1])
"""
# KEYS[1]: the key's set; ARGV: member, ttl (ms). Pushes a held place's expiry forward (not one already gone).
_RENEW = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local renewed = redis.call('ZADD', KEYS[1], 'XX', 'CH', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return renewed
"""


class Slot:
    """One place taken, renewed while held; :meth:`release` (idempotent) gives it back."""

    def __init__(self, owner: KeySlots, name: str, member: str) -> None:
        self._owner, self._name, self._member = owner, name, member
        self._renewing: asyncio.Task[None] | None = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(self._owner.ttl / 3)
            try:
                await self._owner.renew(self._name, self._member)
            except RedisError as exc:  # the place expires unless a later renewal gets through
                logger.warning("could not renew an upload or stream place: %s", exc)

    async def release(self) -> None:
        if self._renewing is None:
            return
        self._renewing.cancel()
        self._renewing = None
        try:
            await self._owner.give_back(self._name, self._member)
        except RedisError as exc:
            logger.warning("could not give a place back (it expires in %gs): %s", self._owner.ttl, exc)

    def release_now(self) -> None:
        """Release from code that cannot wait (a finalizer), blocking for the one Redis call."""
        if self._renewing is None:
            return
        with suppress(RuntimeError):  # the event loop is closed: nothing renews the place any more
            self._renewing.get_loop().call_soon_threadsafe(self._renewing.cancel)
        self._renewing = None
        try:
            self._owner.redis.zrem(self._name, self._member)
        except RedisError as exc:
            logger.warning("could not give a place back (it expires in %gs): %s", self._owner.ttl, exc)


class _LocalSlot(Slot):
    """A place this process counted itself while Redis did not answer; released in this process alone."""

    def __init__(self, held: dict[str, int], key: str) -> None:
        self._held, self._key, self._taken = held, key, True

    def _give_back(self) -> None:
        if self._taken:
            self._taken = False
            self._held[self._key] -= 1

    async def release(self) -> None:
        self._give_back()

    def release_now(self) -> None:
        self._give_back()


class KeySlots:
    """At most ``limit`` places per key at once, across every process using the same Redis database."""

    def __init__(
        self, redis: Redis, limit: int, *, code: str, what: str, ttl: float, fallbacks: Counter | None = None
    ) -> None:
        self.redis, self.limit, self.code, self.what, self.ttl = redis, limit, code, what, ttl
        self._take: Any = redis.register_script(_TAKE)
        self._renew: Any = redis.register_script(_RENEW)
        self._fallbacks = fallbacks
        self._local: dict[str, int] = {}  # places counted here while Redis does not answer

    def _name(self, key: str) -> str:
        return f"swapfarm:slots:{self.code}:{key}"

    async def take(self, key: str) -> Slot:
        """Take a place for ``key``.

        Raises:
            TooManyRequestsError: the key holds ``limit`` places already (in this process alone while Redis does
                not answer).
        """
        name, member = self._name(key), uuid.uuid4().hex
        try:
            held = int(
                await run_in_threadpool(self._take, keys=[name], args=[self.limit, member, int(self.ttl * 1000)])
            )
        except RedisError as exc:
            return self._take_here(key, exc)
        if held < 0:
            raise self._full()
        return Slot(self, name, member)

    def _full(self) -> TooManyRequestsError:
        return TooManyRequestsError(f"this API key has {self.limit} {self.what} open, the most allowed", code=self.code)

    def _take_here(self, key: str, cause: RedisError) -> Slot:
        logger.warning("the %s count is unavailable (%s): counting this process's places alone", self.what, cause)
        if self._fallbacks is not None:
            self._fallbacks.labels(cap=self.code).inc()
        if self._local.get(key, 0) >= self.limit:
            raise self._full()
        self._local[key] = self._local.get(key, 0) + 1
        return _LocalSlot(self._local, key)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[Slot]:
        """A place for ``key`` while the block runs (:meth:`take`, then :meth:`Slot.release`)."""
        slot = await self.take(key)
        try:
            yield slot
        finally:
            await slot.release()

    async def renew(self, name: str, member: str) -> None:
        await run_in_threadpool(self._renew, keys=[name], args=[member, int(self.ttl * 1000)])

    async def give_back(self, name: str, member: str) -> None:
        await run_in_threadpool(self.redis.zrem, name, member)
