"""Following a job: its chunks, its event log, and the log as server-sent events until the job ends.

An API key holds at most ``max_streams_per_key`` event streams at once (429 ``too_many_streams``), and its key is
checked again at every poll: a stream of a key revoked meanwhile ends with an ``error`` event (``unauthorized``).
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy import select

from api.auth import Caller
from api.schemas import (
    JOB_ID_EXAMPLE,
    ChunkList,
    ErrorBody,
    ErrorDetail,
    EventList,
    EventView,
    error_responses,
)
from api.slots import KeySlots, Slot
from api.views import chunk_view, event_view, job_view, tenant_names
from shared import events
from shared.db import session_scope
from shared.errors import UnauthorizedError
from shared.models import INT32_MAX, INT64_MAX, Chunk, utcnow
from shared.progress import progress_of
from shared.settings import Settings
from shared.states import FINISHED_JOB_STATES
from shared.tenants import Principal, key_alive, owned_job

router = APIRouter(prefix="/v1/jobs", tags=["progress"])

JobId = Annotated[str, PathParam(description="The job's id", examples=[JOB_ID_EXAMPLE])]
# Events are numbered when inserted but seen when committed, which may be in another order: the stream looks
# back this far for late arrivals, and never sends an event twice.
_SETTLE = timedelta(seconds=10)


class EventStreamResponse(StreamingResponse):
    media_type = "text/event-stream"


@router.get("/{job_id}/chunks", response_model=ChunkList, responses=error_responses(404))
def list_chunks(
    request: Request,
    caller: Caller,
    job_id: JobId,
    after: Annotated[int, Query(ge=-1, le=INT32_MAX, description="Only chunks with a larger index")] = -1,
    limit: Annotated[int, Query(ge=1, le=1000, description="Chunks per page")] = 500,
) -> ChunkList:
    """The job's chunks in order, a page at a time, with their state, attempts, worker and latest error (empty
    until it is planned)."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        query = select(Chunk).where(Chunk.job_id == job.id, Chunk.index > after).order_by(Chunk.index)
        rows = session.scalars(query.limit(limit + 1)).all()
        page = rows[:limit]
        return ChunkList(chunks=[chunk_view(c) for c in page], next_after=page[-1].index if len(rows) > limit else None)


@router.get("/{job_id}/events", response_model=EventList, responses=error_responses(404))
def list_events(
    request: Request,
    caller: Caller,
    job_id: JobId,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="Only events with a larger id")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> EventList:
    """The job's event log, oldest first: state changes, chunk attempts with their workers, errors, retries."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        job = owned_job(session, caller, job_id)
        rows = [event_view(e) for e in events.after(session, job.id, after, limit)]
    return EventList(events=rows, next_after=rows[-1].id if rows else None)


def _poll(settings: Settings, caller: Principal, job_id: str, after_id: int) -> Polled:
    """The job, its new events and their ages, and whether it ended.

    Raises:
        UnauthorizedError: the caller's key was revoked since the stream began.
    """
    with session_scope(settings.database_url) as session:
        if not key_alive(session, caller.key_id):
            raise UnauthorizedError("the API key was revoked; the stream ends")
        # The job first: every event committed before its state was read is then in the events read after.
        job = owned_job(session, caller, job_id)
        view = job_view(job, progress_of(session, job), settings, tenant_names(session, caller, [job]))
        rows = events.after(session, job.id, after_id, 500)
        now = utcnow()
        return Polled(
            view, [event_view(e) for e in rows], [(e.id, (now - e.at).total_seconds()) for e in rows],
            view.status in FINISHED_JOB_STATES,
        )  # fmt: skip


@dataclass(frozen=True)
class Polled:
    """One look at what a stream follows: its view, its new events (with their ages, in seconds) and whether
    it ended."""

    view: BaseModel
    events: Sequence[EventView]
    ages: Sequence[tuple[int, float]]
    ended: bool


Poll = Callable[[int], Polled]  # the events after this id


async def _stream(
    request: Request, settings: Settings, poll: Poll, kind: str, last_id: int, max_seconds: int
) -> AsyncIterator[str]:
    deadline = time.monotonic() + max_seconds
    settled, sent = last_id, set[int]()
    previous: BaseModel | None = None
    yield "retry: 2000\n\n"
    while True:
        try:
            polled = await run_in_threadpool(poll, settled)
        except UnauthorizedError as exc:
            error = ErrorBody(error=ErrorDetail(code=exc.code, message=exc.message))
            yield f"event: error\ndata: {error.model_dump_json()}\n\n"
            return
        for event in polled.events:
            if event.id not in sent:
                sent.add(event.id)
                yield f"id: {event.id}\nevent: event\ndata: {event.model_dump_json()}\n\n"
        old = [event_id for event_id, age in polled.ages if age > _SETTLE.total_seconds()]
        if old:
            settled = max(settled, *old)
            sent = {i for i in sent if i > settled}
        if polled.view != previous:
            previous = polled.view
            yield f"event: {kind}\ndata: {polled.view.model_dump_json()}\n\n"
        if polled.ended:
            yield f"event: end\ndata: {polled.view.model_dump_json()}\n\n"
            return
        if time.monotonic() > deadline or await request.is_disconnected():
            return
        await asyncio.sleep(settings.events_poll_seconds)


async def open_stream(
    request: Request, caller: Principal, poll: Poll, *, kind: str, last_event_id: int | None, max_seconds: int
) -> EventStreamResponse:
    """The events ``poll`` finds as server-sent events (``event``; ``kind``: the view whenever it changes; a last
    ``end``), holding one of the key's stream places until it ends: the one stream behind every ``…/events/stream``.

    Raises:
        What ``poll`` raises at its first look (a 404 before the stream starts). TooManyRequestsError:
            ``too_many_streams``, the key's places are taken.
    """
    settings: Settings = request.app.state.settings
    await run_in_threadpool(poll, INT64_MAX)  # 404 before the stream starts
    slots: KeySlots = request.app.state.stream_slots
    slot = await slots.take(caller.key_id)
    stream = _held(slot, _stream(request, settings, poll, kind, last_event_id or 0, max_seconds))
    weakref.finalize(stream, slot.release_now)  # a stream never started (the client left) gives its place back too
    return EventStreamResponse(stream, headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get(
    "/{job_id}/events/stream",
    response_class=EventStreamResponse,
    responses={
        200: {
            "description": (
                "Server-sent events: `event` (one EventView per log entry, `id` = its id), `job` (the JobView "
                "whenever it changes: state, progress, ETA) and a last `end` (the final JobView) when the job ends."
            ),
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "example": 'id: 7\nevent: event\ndata: {"id": 7, "kind": "chunk_done", ...}\n\n',
                }
            },
        },
        **error_responses(404, 429),
    },
)
async def stream_events(
    request: Request,
    caller: Caller,
    job_id: JobId,
    last_event_id: Annotated[
        int | None, Header(alias="Last-Event-ID", ge=0, le=INT64_MAX, description="Resume after this event")
    ] = None,
    max_seconds: Annotated[
        int, Query(ge=1, le=3600, description="End the stream after this long; clients reconnect")
    ] = 600,
) -> EventStreamResponse:
    """The job's events as server-sent events, from the start (or after ``Last-Event-ID``) until the job ends.

    A key has at most ``max_streams_per_key`` streams open (429 ``too_many_streams``); a stream whose key is
    revoked ends with an ``error`` event."""
    settings: Settings = request.app.state.settings
    return await open_stream(
        request, caller, partial(_poll, settings, caller, job_id), kind="job", last_event_id=last_event_id,
        max_seconds=max_seconds,
    )  # fmt: skip


async def _held(slot: Slot, stream: AsyncIterator[str]) -> AsyncIterator[str]:
    """``stream``, holding ``slot`` until it ends."""
    try:
        async for item in stream:
            yield item
    finally:
        await slot.release()
