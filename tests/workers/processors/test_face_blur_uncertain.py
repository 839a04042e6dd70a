"""``face.blur_uncertain: "frame"``: where a track is lost (its face carried on past its last detection), strict
``face_blur`` hides the whole frame, and its faces event counts those frames."""

from __future__ import annotations

import numpy as np

from shared.tallies import FaceTally
from tests.support.faces import detector
from workers.faces.detection import Face
from workers.processors.base import Work
from workers.processors.face_blur import FaceBlurProcessor


def _frames() -> np.ndarray:
    rng = np.random.default_rng(3)
    return rng.integers(0, 256, (2, 64, 96, 3), dtype=np.uint8)


def _face(*, lost: bool) -> Face:
    box = np.asarray([10, 10, 30, 30], np.float32)
    return Face(box=box, landmarks=np.full((5, 2), 20, np.float32), score=0.4, filled=lost, lost=lost)


def test_a_frame_where_a_track_is_lost_is_hidden_whole_and_counted() -> None:
    frames = _frames()
    processor = FaceBlurProcessor(detector("yunet"), margin=0.2, uncertain="frame")
    out = processor.stages()[0](Work(frames.copy(), faces=[[_face(lost=False)], [_face(lost=True)]])).frames
    far = (slice(40, 64), slice(50, 96))  # away from the face's grown box
    assert np.array_equal(out[0][far], frames[0][far])  # a detected face: only it is hidden
    changed = np.abs(out[1].astype(int) - frames[1].astype(int)).max(axis=-1) > 2
    assert changed.mean() > 0.9  # a lost track: nothing of the frame shows
    tally = processor.tally()
    assert (tally.whole, tally.hidden, tally.filled, tally.frames) == (1, 2, 1, 2)
    assert FaceTally.parse(tally.message()) == tally  # the event says it, and reads back


def test_by_default_a_lost_track_hides_its_face_alone() -> None:
    frames = _frames()
    processor = FaceBlurProcessor(detector("yunet"), margin=0.2)
    out = processor.stages()[0](Work(frames.copy(), faces=[[], [_face(lost=True)]])).frames
    assert np.array_equal(out[0], frames[0])
    assert np.array_equal(out[1][40:, 50:], frames[1][40:, 50:])
    assert processor.tally().whole == 0
