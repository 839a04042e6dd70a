"""Face tracks (workers/faces/tracking.py): association, gaps filled, low scores kept only near confident ones,
landmarks smoothed, and decisions that read only a bounded window (what makes chunks independent)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from workers.faces.detection import Face
from workers.faces.tracking import FaceTracker, TrackedFrame, box_iou


def _face(x: float, y: float, size: float = 40.0, score: float = 0.9, jitter: float = 0.0) -> Face:
    box = np.asarray([x, y, x + size, y + size], np.float32)
    points = np.asarray([[0.3, 0.4], [0.7, 0.4], [0.5, 0.6], [0.35, 0.8], [0.65, 0.8]], np.float32) * size + np.asarray(
        [x, y], np.float32
    )
    return Face(box=box, landmarks=points + jitter, score=score)


def _run(tracker: FaceTracker, frames: list[list[Face]]) -> list[TrackedFrame]:
    out: list[TrackedFrame] = []
    for faces in frames:
        tracker.update(faces)
        out.extend(tracker.ready())
    out.extend(tracker.flush())
    return out


def test_box_iou() -> None:
    a = np.asarray([[0, 0, 10, 10]], np.float32)
    b = np.asarray([[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30]], np.float32)
    assert np.allclose(box_iou(a, b), [[1.0, 1 / 3, 0.0]])


def test_two_moving_faces_keep_their_tracks_and_every_frame_comes_back_once_in_order() -> None:
    frames = [[_face(10 + 6 * t, 50), _face(300 - 6 * t, 60)] for t in range(30)]
    out = _run(FaceTracker(high=0.5, low=0.2, max_gap=3), frames)
    assert [f.index for f in out] == list(range(30))
    ids_by_row = {
        row: {face.track for f in out for face in f.faces if round(float(face.box[1])) == row} for row in (50, 60)
    }
    assert all(len(ids) == 1 for ids in ids_by_row.values())
    assert ids_by_row[50] != ids_by_row[60]


def test_a_short_gap_is_filled_by_interpolation_and_a_long_one_is_not() -> None:
    frames = [[_face(10 + 5 * t, 50)] for t in range(20)]
    for t in (6, 7, 8):  # a gap of 3 frames
        frames[t] = []
    for t in range(12, 17):  # a gap of 5 frames
        frames[t] = []
    out = _run(FaceTracker(high=0.5, low=0.2, max_gap=3), frames)
    for t in (6, 7, 8):
        (face,) = out[t].faces
        assert face.filled
        assert np.allclose(face.box, [10 + 5 * t, 50, 50 + 5 * t, 90], atol=1e-3)
    assert all(out[t].faces == [] for t in range(12, 17))
    assert not any(face.filled for t in (0, 5, 9, 11) for face in out[t].faces)


def test_a_doubtful_detection_counts_near_a_confident_one_of_its_track_and_not_alone() -> None:
    frames = [[_face(10 + 4 * t, 50, score=0.9 if t == 10 else 0.3)] for t in range(40)]
    frames = [[*faces, _face(400, 300, score=0.3)] for faces in frames]  # a doubtful blob that never firms up
    tracker = FaceTracker(high=0.5, low=0.2, max_gap=2)
    out = _run(tracker, frames)
    near = [t for t, f in enumerate(out) if any(face.box[1] == 50 for face in f.faces)]
    assert near == list(range(10 - tracker.context, 10 + tracker.context + 1))
    assert not any(face.box[0] == 400 for f in out for face in f.faces)
    strict = _run(FaceTracker(high=0.5, low=0.2, max_gap=2, keep_doubtful=True), frames)
    assert all(any(face.box[0] == 400 for face in f.faces) for f in strict)


def test_landmarks_are_smoothed_along_a_track_without_lag_on_steady_motion() -> None:
    rng = np.random.default_rng(0)
    frames = [[_face(10 + 3 * t, 50, jitter=float(rng.normal(0, 2.0)))] for t in range(40)]
    truth = [_face(10 + 3 * t, 50).landmarks for t in range(40)]

    def error(smoothing: float) -> float:
        out = _run(FaceTracker(high=0.5, low=0.2, max_gap=2, smoothing=smoothing), frames)
        return float(np.mean([np.abs(f.faces[0].landmarks - truth[t]).mean() for t, f in enumerate(out[5:35], 5)]))

    assert error(1.0) < 0.7 * error(0.0)
    steady = _run(
        FaceTracker(high=0.5, low=0.2, max_gap=2, smoothing=1.0), [[_face(10 + 3 * t, 50)] for t in range(20)]
    )
    assert np.allclose(steady[10].faces[0].landmarks, truth[10], atol=1e-3)


def test_the_result_for_a_frame_depends_only_on_its_context_window() -> None:
    rng = np.random.default_rng(1)
    frames = []
    for t in range(60):
        faces = [_face(10 + 5 * t, 50, score=float(rng.uniform(0.25, 0.95)))]
        if t % 7 == 3:
            faces = []
        frames.append(faces)
    full = _run(FaceTracker(high=0.5, low=0.2, max_gap=3, smoothing=0.5), frames)
    context = FaceTracker(high=0.5, low=0.2, max_gap=3).context
    for start in (0, 7, 20, 41):
        lo, hi = max(0, start - context), min(60, start + 7 + context)
        part = _run(FaceTracker(high=0.5, low=0.2, max_gap=3, smoothing=0.5), frames[lo:hi])
        for t in range(start, min(60, start + 7)):
            got = sorted((tuple(np.round(f.box, 3)), f.filled) for f in part[t - lo].faces)
            want = sorted((tuple(np.round(f.box, 3)), f.filled) for f in full[t].faces)
            assert got == want, t


def _chunk_with_early_stop(
    tracker: FaceTracker, frames: list[list[Face]], start: int, stop: int
) -> tuple[list[TrackedFrame], int]:
    """A chunk's frames decided from its look-behind, its frames and as much look-ahead as ``settled`` asks for."""
    lo, hi = max(0, start - tracker.context), min(len(frames), stop + tracker.context)
    out: list[TrackedFrame] = []
    read = 0
    for index in range(lo, hi):
        if index >= stop and tracker.settled(stop - 1 - lo):
            break
        tracker.update(frames[index])
        read += 1
        out.extend(tracker.ready())
    out.extend(tracker.flush())
    return out[start - lo : stop - lo], read - (stop - lo)


def test_a_look_ahead_stopped_once_settled_decides_the_chunk_as_the_whole_look_ahead_does() -> None:
    rng = np.random.default_rng(3)
    frames: list[list[Face]] = []
    for t in range(80):
        faces = []
        for lane in range(3):  # three faces, each missed now and then, scores confident to doubtful
            if rng.uniform() > 0.3:
                faces.append(_face(20 + 4 * t, 60 * lane, score=float(rng.uniform(0.22, 0.95))))
        frames.append(faces)
    for keep_doubtful in (True, False):
        full = _run(FaceTracker(high=0.5, low=0.2, max_gap=3, keep_doubtful=keep_doubtful), frames)
        read_ahead = []
        for start in range(0, 80, 9):
            stop = min(80, start + 9)
            tracker = FaceTracker(high=0.5, low=0.2, max_gap=3, keep_doubtful=keep_doubtful)
            part, ahead = _chunk_with_early_stop(tracker, frames, start, stop)
            read_ahead.append(ahead)
            for t, got in zip(range(start, stop), part, strict=True):
                want = sorted((tuple(np.round(f.box, 3)), f.filled) for f in full[t].faces)
                assert sorted((tuple(np.round(f.box, 3)), f.filled) for f in got.faces) == want, (keep_doubtful, t)
        assert min(read_ahead[:-1]) < tracker.context  # some chunk ends needed less than the whole look-ahead
    # with nothing to continue, a chunk reads no look-ahead at all
    still = [[_face(10, 10)] for _ in range(20)]
    assert _chunk_with_early_stop(FaceTracker(high=0.5, low=0.2, max_gap=3), still, 0, 10)[1] == 0


def test_with_a_reach_a_small_fast_face_stays_one_track_and_its_missed_frames_are_filled() -> None:
    # a 26-px face moving 64 px a frame (as on the 1080p anonymiser clips): no box overlaps its last one
    frames = [[_face(1000 - 64 * t, 300, size=26)] for t in range(10)]
    frames[4] = frames[5] = []  # missed twice
    without = _run(FaceTracker(high=0.35, low=0.15, max_gap=4, keep_doubtful=True), frames)
    assert len({face.track for f in without for face in f.faces}) == 8  # a new track every frame
    assert without[4].faces == [] and without[5].faces == []
    reached = _run(FaceTracker(high=0.35, low=0.15, max_gap=4, keep_doubtful=True, reach=3.0), frames)
    assert len({face.track for f in reached for face in f.faces}) == 1
    for t in (4, 5):
        (face,) = reached[t].faces
        assert face.filled and np.allclose(face.box, [1000 - 64 * t, 300, 1026 - 64 * t, 326], atol=1e-3)


def test_a_reach_joins_no_face_of_another_size_or_beyond_it() -> None:
    tracker = FaceTracker(high=0.35, low=0.15, max_gap=4, reach=3.0)
    tracker.update([_face(1000, 300, size=26)])
    (far,) = tracker.update([_face(1000 - 4 * 26, 300, size=26)])  # 4 sizes away
    (large,) = tracker.update([_face(1000, 300, size=80)])  # three times the size, where the first one was
    assert len({0, far.track, large.track}) == 3


def test_a_face_found_before_a_tracks_first_detection_joins_it_where_that_frame_is_not_decided() -> None:
    tracker = FaceTracker(high=0.35, low=0.15, max_gap=4, keep_doubtful=True, reach=3.0)
    out: list[TrackedFrame] = []
    for t in range(8):
        tracker.update([_face(1000 - 64 * t, 300, size=26)] if t >= 5 else [])
        if t == 6:  # its second detection: its motion is known
            ((ident, first, box, velocity),) = tracker.newly_moving()
            assert first == 5 and np.allclose(velocity, [-64, 0, -64, 0])
            assert tracker.observe_before(ident, 1, replace(_face(1000 - 64, 300, size=26), track=ident))
        out.extend(tracker.ready())
    assert not tracker.observe_before(ident, 0, _face(1000, 300, size=26))  # frame 0 is decided: too late
    out.extend(tracker.flush())
    assert [len(f.faces) for f in out] == [0, 1, 1, 1, 1, 1, 1, 1]  # frame 1 found, 2-4 filled between 1 and 5
    assert {face.track for f in out for face in f.faces} == {ident}


def test_a_new_track_is_bridged_to_a_track_lost_a_frame_before_it_within_the_reach_a_frame() -> None:
    """A 30-px face moving 75 px a frame, found on alternate frames only: each detection is 5 face sizes from the
    last, beyond the reach, so each starts a track; the new one is bridged to the last, and the frame between is
    where to look for it."""
    tracker = FaceTracker(high=0.35, low=0.15, max_gap=4, keep_doubtful=True, reach=3.0)
    (first,) = tracker.update([_face(1000, 300, size=30)])
    tracker.update([])
    (second,) = tracker.update([_face(1000 - 150, 300, size=30)])
    assert first.track != second.track
    ((ident, index, box, last, before),) = tracker.newly_bridged(3.0, 2)
    assert (ident, index, last) == (second.track, 2, 0)
    assert np.allclose(box, second.box) and np.allclose(before, first.box)
    assert tracker.observe_before(ident, 1, replace(_face(1000 - 75, 300, size=30), track=ident))
    tracker.update([])
    assert tracker.newly_bridged(3.0, 2) == []  # only in the frame of a track's first detection


def test_no_bridge_to_a_face_of_another_size_too_far_or_too_long_ago() -> None:
    cases = {  # the lost face, then frames without a face, then a 30-px face at (1000, 300)
        "three times the size": (_face(1000, 420, size=90), 1),
        "7 face sizes away a frame apart (6 at most)": (_face(1000 + 7 * 30, 300, size=30), 1),
        "4 frames before (3 at most)": (_face(1000 + 5 * 30, 300, size=30), 3),
    }
    for case, (lost, empty) in cases.items():
        tracker = FaceTracker(high=0.35, low=0.15, max_gap=4, keep_doubtful=True, reach=3.0)
        (old,) = tracker.update([lost])
        for _ in range(empty):
            tracker.update([])
        (new,) = tracker.update([_face(1000, 300, size=30)])
        assert new.track != old.track, case
        assert tracker.newly_bridged(3.0, 2) == [], case
