"""Job and chunk states and the transitions allowed between them.

A state change, its attempt count and its error code are written in one transaction (``shared.lifecycle``);
this module only says which changes are legal, so that a late or duplicated task cannot move a row backwards.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    WAITING = "waiting"  # accepted, waiting for its tenant's limit of jobs running at once
    QUEUED = "queued"
    PLANNING = "planning"
    RENDERING = "rendering"
    STITCHING = "stitching"
    PAUSED = "paused"  # the user paused it: no new chunk starts (running ones finish) until it is resumed
    AWAITING_APPROVAL = "awaiting_approval"  # its preview is rendered; the rest waits for approve or reject
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ChunkStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    HELD = "held"  # a previewed job's chunk, rendered only once the preview is approved
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


_PAUSE = JobStatus.PAUSED
JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.PLANNING, JobStatus.FAILED, JobStatus.CANCELLED, _PAUSE}),
    # planning → queued: the planner died and the reaper hands the job to another one; planning → paused drops
    # the plan being made (the job is planned again on resume)
    JobStatus.PLANNING: frozenset(
        {JobStatus.RENDERING, JobStatus.QUEUED, JobStatus.FAILED, JobStatus.CANCELLED, _PAUSE}
    ),
    # rendering → awaiting_approval: the preview's chunks are done, the rest are held
    JobStatus.RENDERING: frozenset(
        {JobStatus.STITCHING, JobStatus.FAILED, JobStatus.CANCELLED, _PAUSE, JobStatus.AWAITING_APPROVAL}
    ),
    # resume: back to waiting, admitted like a new job, to the step it was paused in (``shared.lifecycle.admit``);
    # a running chunk that fails its last attempt still fails it
    JobStatus.PAUSED: frozenset({JobStatus.WAITING, JobStatus.FAILED, JobStatus.CANCELLED}),
    # approve: waiting (then rendering the held chunks); reject or the preview's expiry: cancelled
    JobStatus.AWAITING_APPROVAL: frozenset({JobStatus.WAITING, JobStatus.CANCELLED}),
    JobStatus.STITCHING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset({JobStatus.WAITING}),  # an explicit retry waits for admission like a new job
    # admitted: to planning, or, for a retried job, back to the step it failed in; to awaiting_approval when its
    # preview is rendered (resumed after its preview finished while paused: ``shared.previewing``), without a place
    JobStatus.WAITING: frozenset(
        {
            JobStatus.QUEUED,
            JobStatus.RENDERING,
            JobStatus.STITCHING,
            JobStatus.CANCELLED,
            _PAUSE,
            JobStatus.AWAITING_APPROVAL,
        }
    ),  # fmt: skip
    JobStatus.CANCELLED: frozenset(),
}

CHUNK_TRANSITIONS: dict[ChunkStatus, frozenset[ChunkStatus]] = {
    ChunkStatus.QUEUED: frozenset({ChunkStatus.RUNNING, ChunkStatus.CANCELLED, ChunkStatus.FAILED}),
    # running → queued: a failed attempt below the limit, or an expired lease
    # (and a job paused with ``now``: the attempt is stopped and not counted)
    ChunkStatus.RUNNING: frozenset({ChunkStatus.DONE, ChunkStatus.QUEUED, ChunkStatus.FAILED, ChunkStatus.CANCELLED}),
    ChunkStatus.HELD: frozenset({ChunkStatus.QUEUED, ChunkStatus.CANCELLED}),  # approved; rejected or expired
    ChunkStatus.DONE: frozenset(),
    ChunkStatus.FAILED: frozenset({ChunkStatus.QUEUED}),
    ChunkStatus.CANCELLED: frozenset({ChunkStatus.QUEUED}),  # a failed job's unfinished chunks, on its retry
}

FINISHED_JOB_STATES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
# The states that count against a tenant's limit of jobs running at once.
# A paused job and a preview awaiting approval do not: they count as waiting (``shared.quotas``).
ACTIVE_JOB_STATES = frozenset({JobStatus.QUEUED, JobStatus.PLANNING, JobStatus.RENDERING, JobStatus.STITCHING})
WAITING_JOB_STATES = frozenset({JobStatus.WAITING, JobStatus.PAUSED, JobStatus.AWAITING_APPROVAL})
# The states a job may be paused in (a stitching job finishes its stitch; an ended one has nothing to pause)
PAUSABLE_JOB_STATES = frozenset({JobStatus.WAITING, JobStatus.QUEUED, JobStatus.PLANNING, JobStatus.RENDERING})
