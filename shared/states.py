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
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ChunkStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


JOB_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.PLANNING, JobStatus.FAILED, JobStatus.CANCELLED}),
    # planning → queued: the planner died and the reaper hands the job to another one
    JobStatus.PLANNING: frozenset({JobStatus.RENDERING, JobStatus.QUEUED, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.RENDERING: frozenset({JobStatus.STITCHING, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.STITCHING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset({JobStatus.WAITING}),  # an explicit retry waits for admission like a new job
    # admitted: to planning, or, for a retried job, back to the step it failed in
    JobStatus.WAITING: frozenset({JobStatus.QUEUED, JobStatus.RENDERING, JobStatus.STITCHING, JobStatus.CANCELLED}),
    JobStatus.CANCELLED: frozenset(),
}

CHUNK_TRANSITIONS: dict[ChunkStatus, frozenset[ChunkStatus]] = {
    ChunkStatus.QUEUED: frozenset({ChunkStatus.RUNNING, ChunkStatus.CANCELLED, ChunkStatus.FAILED}),
    # running → queued: a failed attempt below the limit, or an expired lease
    ChunkStatus.RUNNING: frozenset({ChunkStatus.DONE, ChunkStatus.QUEUED, ChunkStatus.FAILED, ChunkStatus.CANCELLED}),
    ChunkStatus.DONE: frozenset(),
    ChunkStatus.FAILED: frozenset({ChunkStatus.QUEUED}),
    ChunkStatus.CANCELLED: frozenset({ChunkStatus.QUEUED}),  # a failed job's unfinished chunks, on its retry
}

FINISHED_JOB_STATES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
# The states that count against a tenant's limit of jobs running at once.
ACTIVE_JOB_STATES = frozenset({JobStatus.QUEUED, JobStatus.PLANNING, JobStatus.RENDERING, JobStatus.STITCHING})
