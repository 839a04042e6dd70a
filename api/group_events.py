"""A job group's events: its members' and its own, as a list a page at a time or as one server-sent event stream.

The stream is the job's (``api.progress.open_stream``: the same places per key, the same late-arrival window, the
same revoked-key end) over the group's events; its ``group`` event carries the GroupView whenever it changes, and it
ends (``end``) when the group's last member has ended (``shared.group_end`` marks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import Caller
from api.groups import GroupEvent, GroupEvents, GroupId, view_of
from api.progress import EventStreamResponse, Polled, open_stream
from api.schemas import error_responses
from api.views import event_view
from shared import groups
from shared.db import session_scope
from shared.errors import UnauthorizedError
from shared.models import INT64_MAX, Job, JobEvent, utcnow
from shared.settings import Settings
from shared.tenants import Principal, key_alive

router = APIRouter(prefix="/v1/groups", tags=["groups"])


def events_after(session: Session, group_id: str, after_id: int, limit: int) -> Sequence[JobEvent]:
    """Every member's events and the group's own with an id above ``after_id``, oldest first."""
    members = select(Job.id).where(Job.group_id == group_id)
    return session.scalars(
        select(JobEvent)
        .where((JobEvent.job_id.in_(members)) | (JobEvent.job_id == group_id), JobEvent.id > after_id)
        .order_by(JobEvent.id)
        .limit(limit)
    ).all()


def _group_event(event: JobEvent) -> GroupEvent:
    return GroupEvent(**event_view(event).model_dump(), job_id=event.job_id)


@router.get("/{group_id}/events", response_model=GroupEvents, responses=error_responses(404), name="events")
def group_events(
    request: Request,
    caller: Caller,
    group_id: GroupId,
    after: Annotated[int, Query(ge=0, le=INT64_MAX, description="`next_after` of the previous page")] = 0,
) -> GroupEvents:
    """Every member's events and the group's own, in the order they happened, a page at a time."""
    settings: Settings = request.app.state.settings
    with session_scope(settings.database_url) as session:
        groups.owned_group(session, caller, group_id)
        events = [_group_event(e) for e in events_after(session, group_id, after, 200)]
    return GroupEvents(events=events, next_after=events[-1].id if events else after)


def _poll(settings: Settings, caller: Principal, group_id: str, after_id: int) -> Polled:
    """The group, its new events and their ages, and whether its last member has ended.

    Raises:
        UnauthorizedError: the caller's key was revoked since the stream began.
    """
    with session_scope(settings.database_url) as session:
        if not key_alive(session, caller.key_id):
            raise UnauthorizedError("the API key was revoked; the stream ends")
        # The group first: the group_finished event commits with its finished_at, so it is in the events read after.
        group = groups.owned_group(session, caller, group_id)
        view = view_of(session, group)
        rows = events_after(session, group_id, after_id, 500)
        now = utcnow()
        return Polled(
            view, [_group_event(e) for e in rows], [(e.id, (now - e.at).total_seconds()) for e in rows],
            group.finished_at is not None,
        )  # fmt: skip


@router.get(
    "/{group_id}/events/stream",
    response_class=EventStreamResponse,
    responses={
        200: {
            "description": (
                "Server-sent events: `event` (one GroupEvent per log entry of a member or of the group, `id` = its "
                "id), `group` (the GroupView whenever it changes) and a last `end` (the final GroupView) when the "
                "group's last member has ended."
            ),
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "example": 'id: 7\nevent: event\ndata: {"id": 7, "kind": "chunk_done", "job_id": "…", ...}\n\n',
                }
            },
        },
        **error_responses(404, 429),
    },
    name="events_stream",
)
async def group_events_stream(
    request: Request,
    caller: Caller,
    group_id: GroupId,
    last_event_id: Annotated[
        int | None, Header(alias="Last-Event-ID", ge=0, le=INT64_MAX, description="Resume after this event")
    ] = None,
    max_seconds: Annotated[
        int, Query(ge=1, le=3600, description="End the stream after this long; clients reconnect")
    ] = 600,
) -> EventStreamResponse:
    """The group's events (its members' and its own) as server-sent events, from the start (or after
    ``Last-Event-ID``) until its last member ends; the key's stream places and a revoked key as for a job's
    stream."""
    settings: Settings = request.app.state.settings
    return await open_stream(
        request, caller, partial(_poll, settings, caller, group_id), kind="group", last_event_id=last_event_id,
        max_seconds=max_seconds,
    )  # fmt: skip
