"""Strict ``face_blur``'s look back: once a track is known, its face looked for closely in the frames before its
first detection that the chunk still holds (:data:`~shared.strict_blur.LOOK_BACK` at most), so a face is hidden
from its first frame, not from its first confident detection."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt

from shared.strict_blur import BRIDGE_GAP, BRIDGE_REACH, LOOK_BACK
from workers.faces.detection import Face
from workers.faces.sweep import DetectionSweep
from workers.faces.tracking import FaceTracker

__all__ = ["look_back"]


def look_back(tracker: FaceTracker, sweep: DetectionSweep, held: dict[int, np.ndarray], score: float) -> None:
    """For each track whose motion just became known, look closely (at ``score``) at the frames before its first
    detection where that motion puts its face, and add what is found there to the track; stop where two frames in a
    row show none (one is passed over: the tracker fills it, as a gap between two detections). Then, for each track
    whose first detection was just fed and that is bridged to one lost a frame or two before it
    (:meth:`~workers.faces.tracking.FaceTracker.newly_bridged`), look at the frames between where a face moving in a
    line from the one to the other would be."""
    for ident, first, box, velocity in tracker.newly_moving():
        anchor, steps = box, 1  # the last box found, and how many frames before it the next frame looked at is
        for back in range(1, LOOK_BACK + 1):
            frame = held.get(first - back)
            if frame is None:
                break
            expected = np.asarray(anchor - velocity * steps, np.float32)
            # a face farther than a face size away is another one (on the 720p clip of seed 13, a face entering at
            # the edge beneath another took that one's track back four frames)
            nearest = _nearest(sweep.look_around(frame, [expected], score), expected, sized=False)
            if nearest is None:
                steps += 1
                if steps > 2:
                    break
                continue  # on the 720p clip of seed 32, a motion-blurred frame stopped a turned face's look-back
            if not tracker.observe_before(ident, first - back, replace(nearest, track=ident)):
                break
            anchor, steps = nearest.box, 1
    for ident, first, box, last, before in tracker.newly_bridged(BRIDGE_REACH, BRIDGE_GAP):
        for index in range(last + 1, first):  # where the face was between, had it moved in a line
            frame = held.get(index)
            if frame is None:
                continue
            expected = np.asarray(before + (box - before) * ((index - last) / (first - last)), np.float32)
            nearest = _nearest(sweep.look_around(frame, [expected], score), expected, sized=True)
            if nearest is not None:
                tracker.observe_before(ident, index, replace(nearest, track=ident))


def _nearest(found: list[Face], expected: npt.NDArray[np.float32], *, sized: bool) -> Face | None:
    """The face of ``found`` nearest ``expected``, within a face size of it and, where ``sized``, of half to twice
    its size; ``None`` where there is none."""
    side = float(max(expected[2:] - expected[:2]))
    if sized:
        found = [f for f in found if 0.5 <= float(max(f.box[2:] - f.box[:2])) / side <= 2.0]
    centre = (expected[:2] + expected[2:]) / 2
    distances = [float(np.linalg.norm((f.box[:2] + f.box[2:]) / 2 - centre)) for f in found]
    return found[int(np.argmin(distances))] if found and min(distances) <= side else None
