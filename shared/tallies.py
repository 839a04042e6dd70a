"""What face processors did, per chunk and per job: face-frames hidden, and how many of them tracks filled in.

Each accepted chunk adds a ``faces`` event per processor (:meth:`FaceTally.message`); when the job succeeds, the
stitch adds one more, without a chunk index, with the whole job's totals (:func:`record_job_totals`), just before
the ``succeeded`` event. Only accepted chunks add events, so a chunk rendered twice (a retry, a lease taken over)
counts once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.events import EventKind, record
from shared.models import JobEvent

__all__ = ["FaceTally", "job_totals", "record_job_totals"]

_MESSAGE = re.compile(
    r"^(?:whole job: )?(\w+) hid (\d+) face-frames, (\d+) of them filled in by tracking"
    r"(?:; (\d+) detector calls for (\d+) frames)?(?:; (\d+) frames hidden whole)?$"
)


@dataclass(frozen=True)
class FaceTally:
    """One processor's count over a chunk or a job.

    Attributes:
        processor: the processor's name (``face_blur``).
        hidden: face-frames it hid (or worked on).
        filled: of those, faces that tracks filled in where the detector found none.
        calls: the runs of the job's detector model (every pass and tile, context frames included), or 0 where
            not counted.
        frames: the frames output, that ``calls`` were spent on.
        whole: frames hidden whole because a track was lost there (``face.blur_uncertain: "frame"``).
    """

    processor: str
    hidden: int
    filled: int
    calls: int = 0
    frames: int = 0
    whole: int = 0

    def message(self, *, job: bool = False) -> str:
        """The event's message; ``job``: the whole job's total."""
        prefix = "whole job: " if job else ""
        cost = f"; {self.calls} detector calls for {self.frames} frames" if self.frames else ""
        cost += f"; {self.whole} frames hidden whole" if self.whole else ""
        return (
            f"{prefix}{self.processor} hid {self.hidden} face-frames, {self.filled} of them filled in by tracking{cost}"
        )

    @classmethod
    def parse(cls, message: str) -> FaceTally | None:
        """The tally a ``faces`` event's message says, or ``None`` for another message."""
        found = _MESSAGE.match(message)
        if not found:
            return None
        return cls(found[1], int(found[2]), int(found[3]), int(found[4] or 0), int(found[5] or 0), int(found[6] or 0))


def job_totals(session: Session, job_id: str) -> list[FaceTally]:
    """The job's chunk ``faces`` events summed per processor (in the order each first appears)."""
    messages = session.scalars(
        select(JobEvent.message)
        .where(JobEvent.job_id == job_id, JobEvent.kind == EventKind.FACES, JobEvent.chunk_index.is_not(None))
        .order_by(JobEvent.id)
    ).all()
    totals: dict[str, FaceTally] = {}
    for message in messages:
        tally = FaceTally.parse(message)
        if tally is None:
            continue
        seen = totals.get(tally.processor, FaceTally(tally.processor, 0, 0))
        totals[tally.processor] = FaceTally(
            tally.processor,
            seen.hidden + tally.hidden,
            seen.filled + tally.filled,
            seen.calls + tally.calls,
            seen.frames + tally.frames,
            seen.whole + tally.whole,
        )
    return list(totals.values())


def record_job_totals(session: Session, job_id: str) -> list[FaceTally]:
    """Add the job's totals as ``faces`` events without a chunk index (one per processor) to the caller's
    transaction; the totals."""
    totals = job_totals(session, job_id)
    for tally in totals:
        record(session, job_id, EventKind.FACES, message=tally.message(job=True))
    return totals
