"""While Redis does not answer, the per-key caps are counted by each API process instead of refusing every upload
(the broker may be away while Postgres still takes jobs): the same limit, a warning and a metric for each place."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry
from redis import Redis

from api.slots import KeySlots, fallback_counter
from shared.errors import TooManyRequestsError
from tests.support.services import free_port


def test_places_are_counted_here_to_the_same_limit_while_redis_is_away(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    away = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=1)  # nothing listens
    slots = KeySlots(away, 2, code="too_many_uploads", what="uploads", ttl=30, fallbacks=fallback_counter(registry))

    async def scenario() -> None:
        first, second = await slots.take("key-a"), await slots.take("key-a")
        with pytest.raises(TooManyRequestsError) as refused:
            await slots.take("key-a")
        assert refused.value.code == "too_many_uploads"
        other = await slots.take("key-b")  # another key has places of its own
        await first.release()
        await first.release()  # idempotent: gives back one place, not two
        again = await slots.take("key-a")
        with pytest.raises(TooManyRequestsError):
            await slots.take("key-a")
        for slot in (second, other, again):
            slot.release_now()
        await slots.take("key-a")

    with caplog.at_level(logging.WARNING, logger="api.slots"):
        asyncio.run(scenario())
    assert registry.get_sample_value("swapfarm_api_slot_fallbacks_total", {"cap": "too_many_uploads"}) == 7
    assert any("counting this process's places alone" in record.getMessage() for record in caplog.records)
