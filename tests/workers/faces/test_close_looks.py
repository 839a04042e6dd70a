"""Strict mode's close looks: which of a scan's doubts it looks at (those no track expects and no face found covers,
the highest scored first, a few a frame), and what confirms a face it holds to a second look."""

from __future__ import annotations

import numpy as np

from shared.strict_blur import DOUBTS_MOST
from workers.faces.close_looks import confirmed, doubts_to_look_at
from workers.faces.detection import Face


def _face(x: float, score: float, side: float = 30.0) -> Face:
    box = np.asarray([x, 100.0, x + side, 100.0 + side], np.float32)
    return Face(box=box, landmarks=np.zeros((5, 2), np.float32), score=score)


def test_a_doubt_a_track_expects_or_a_found_face_covers_is_not_looked_at_again() -> None:
    expected = np.asarray([0.0, 90.0, 50.0, 140.0], np.float32)  # a track's box over the first doubt
    found = _face(210.0, 0.9)  # a face the passes found, over the third
    doubts = [_face(10.0, 0.12), _face(100.0, 0.06), _face(220.0, 0.14)]
    boxes = doubts_to_look_at(doubts, [expected, found.box])
    assert [float(box[0]) for box in boxes] == [100.0]


def test_only_the_highest_scored_doubts_are_looked_at_when_a_frame_has_many() -> None:
    doubts = [_face(100.0 * i, 0.05 + 0.01 * i) for i in range(DOUBTS_MOST + 3)]
    boxes = doubts_to_look_at(doubts, [])
    assert len(boxes) == DOUBTS_MOST
    assert [float(box[0]) for box in boxes] == [100.0 * i for i in range(DOUBTS_MOST + 2, 2, -1)]


def test_a_face_is_confirmed_only_by_a_close_look_that_finds_it_where_it_is() -> None:
    faces = [_face(0.0, 0.3, side=120.0), _face(400.0, 0.2, side=120.0)]
    looks = [_face(10.0, 0.8, side=110.0), _face(700.0, 0.9, side=110.0)]  # over the first; elsewhere
    assert confirmed(faces, looks) == [True, False]
    assert confirmed(faces, []) == [False, False]
