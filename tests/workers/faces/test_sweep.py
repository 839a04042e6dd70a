"""The strict anonymiser's detection sweep (workers/faces/sweep.py) with a second detector: on the synthetic clip
with exact ground truth, frame by frame (no tracks), the two real models together find every face where YuNet's
sweep alone leaves one."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from shared.strict_blur import DOUBTFUL_MOST, EDGE_DEPTH, EDGE_FACE, EDGE_SCORE, MIN_FACE, STRICT_HIGH, STRICT_LOW
from tests.support import crowd
from tests.support.anonymiser_clips import ClipSpec, Truth, generate
from tests.support.faces import detector, same_faces
from tests.support.forking import answer_of_forked_child
from tests.support.media import read_frames
from workers.faces import sweep
from workers.faces.detection import Face
from workers.faces.edges import edge_canvases, edge_faces
from workers.faces.sweep import DetectionSweep


def _found(faces: list[Face], truth: crowd.Truth) -> bool:
    """Whether a box holds the centre of the face's core."""
    x1, y1, x2, y2 = truth.core
    x, y = (x1 + x2) / 2, (y1 + y2) / 2
    return any(f.box[0] <= x <= f.box[2] and f.box[1] <= y <= f.box[3] for f in faces)


WINDOW = range(36, 46)


def test_a_second_detector_finds_the_faces_the_first_ones_sweep_misses(tmp_path: Path) -> None:
    clip = tmp_path / "faces.mp4"
    # frames 36-45 of the clip, around the one (41) where YuNet's sweep misses a 53 px face: ten frames keep it cheap
    truths = [t for t in crowd.build(clip) if t.frame in WINDOW]
    decoded = read_frames(clip)
    frames = {t: np.ascontiguousarray(decoded[t, :, :, ::-1]) for t in WINDOW}  # BGR, as workers see them
    first, second = detector("yunet"), detector("scrfd")
    alone = dict(zip(WINDOW, DetectionSweep(first).detect(list(frames.values()), STRICT_LOW), strict=True))
    both = dict(
        zip(WINDOW, DetectionSweep(first, others=[second]).detect(list(frames.values()), STRICT_LOW), strict=True)
    )
    missed_alone = [(t.frame, t.face) for t in truths if not _found(alone[t.frame], t)]
    missed_both = [(t.frame, t.face) for t in truths if not _found(both[t.frame], t)]
    assert missed_both == [], missed_both
    assert missed_alone, "the clip no longer shows what the second detector adds"
    # a union: whatever the first detector's sweep found is still found
    assert all(_found(both[t.frame], t) for t in truths if _found(alone[t.frame], t))


def test_the_second_detector_adds_a_small_face_the_first_one_misses_and_none_of_its_own_false_alarms() -> None:
    # frame 38 of the 720p benchmark clip of seed 14: a 27-px face YuNet's passes score 0.09 (below the low score),
    # which SCRFD scores 0.49; at the low score SCRFD also finds faces of 10-15 px (and one box as large as the frame)
    # in the texture, which blurred 64-70 % of the background of two 1080p clips. YuNet's own close look at what its
    # passes doubt finds the face too.
    generated = list(generate(ClipSpec(width=1280, height=720, frames=40, seed=14)))[38:39]
    first, second = detector("yunet"), detector("scrfd")
    for frame, truths in generated:
        small = next(t for t in truths if t.face == 103)
        passes = DetectionSweep(first).scan(frame, STRICT_LOW)
        assert not _holds(passes.found, small), f"frame {small.frame}"
        assert _holds(DetectionSweep(first).finish(frame, passes, STRICT_LOW), small), "the close look at a doubt"
        sweep_ = DetectionSweep(first, others=[second])
        scan = sweep_.scan(frame, STRICT_LOW)
        both = sweep_.finish(frame, scan, STRICT_LOW)
        scrfd = DetectionSweep(second, turns=()).detect_frame(frame, STRICT_LOW)
        assert _holds(scan.others[0], small) and _holds(both, small), f"frame {small.frame}"
        false_alarms = [f for f in scrfd if not any(_near(f, t) for t in truths)]
        assert false_alarms, "SCRFD no longer finds false faces on this frame at the low score"
        assert not [f for f in both if not any(_near(f, t) for t in truths)], f"frame {small.frame}"


def _holds(faces: list[Face], truth: Truth) -> bool:
    x1, y1, x2, y2 = truth.core
    return any(f.box[0] <= (x1 + x2) / 2 <= f.box[2] and f.box[1] <= (y1 + y2) / 2 <= f.box[3] for f in faces)


def _near(face: Face, truth: Truth) -> bool:
    """Whether a box's centre is within a face size of the face's centre (a box of that face)."""
    centre = (face.box[:2] + face.box[2:]) / 2
    x1, y1, x2, y2 = truth.box
    return abs(centre[0] - (x1 + x2) / 2) < truth.size and abs(centre[1] - (y1 + y2) / 2) < truth.size


def test_a_doubtful_face_taller_than_half_the_frame_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # frame 11 of the 1080p benchmark clip of seed 15: a pass on the whole frame, shrunk into the detector's input,
    # finds a false face 1028 px tall at 0.27; carried on by its track it blurred up to 85 % of a frame
    frame, truths = next(itertools.islice(generate(ClipSpec(width=1920, height=1080, frames=40, seed=15)), 11, None))
    tallest = DOUBTFUL_MOST * frame.shape[0]
    monkeypatch.setattr(sweep, "CONFIRM_BELOW", 0.0)  # the height rule alone (a close look would drop it too)
    monkeypatch.setattr(sweep, "DOUBTFUL_MOST", 10.0)  # no limit: the clip still shows the false face
    unlimited = DetectionSweep(detector("yunet")).detect_frame(frame, STRICT_LOW, every_pass=True)
    assert [f for f in unlimited if float(f.box[3] - f.box[1]) > tallest and f.score < STRICT_HIGH]
    monkeypatch.setattr(sweep, "DOUBTFUL_MOST", DOUBTFUL_MOST)
    found = DetectionSweep(detector("yunet")).detect_frame(frame, STRICT_LOW, every_pass=True)
    assert not [f for f in found if float(f.box[3] - f.box[1]) > tallest]
    # and the faces found with no limit are still found
    assert all(any(_near(f, t) for f in found) for t in truths if any(_near(f, t) for f in unlimited))


def test_a_face_mostly_below_the_frames_edge_is_found_on_the_edge_mirrored_and_nowhere_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # frame 0 of the 720p benchmark clip of seed 34: a 33-px face whose upper half shows at the bottom edge, there for
    # the whole clip; no view of the frame itself finds it, so no track ever hid it (30 frames in a row showed it)
    frame, truths = next(iter(generate(ClipSpec(width=1280, height=720, frames=40, seed=34))))
    cut = next(t for t in truths if t.face == 4)
    assert "edge" in cut.notes and cut.box[3] > frame.shape[0] > cut.box[1]
    found = DetectionSweep(detector("yunet")).detect_frame(frame, STRICT_LOW, every_pass=True)
    assert _holds(found, cut)
    (face,) = [f for f in found if _near(f, cut)]
    assert face.score >= EDGE_SCORE and face.box[1] < frame.shape[0] < face.box[3]  # reaching past the edge
    # the other views alone: the clip still shows the case
    monkeypatch.setattr(sweep, "edge_canvases", lambda *_, **__: [])
    assert not _holds(DetectionSweep(detector("yunet")).detect_frame(frame, STRICT_LOW, every_pass=True), cut)


DEPTH, ZOOM = round(EDGE_DEPTH * MIN_FACE), EDGE_FACE / MIN_FACE  # the edge pass at the defaults


@pytest.mark.parametrize("whole", [False, True], ids=["canvases", "strips-whole"])
def test_the_edge_pass_finds_no_face_on_a_face_free_plate_nor_a_face_inside_the_frame_nor_its_mirror_image(
    whole: bool,
) -> None:
    # a face-free plate (the mirrored strip of one gave false faces at 0.15-0.32), and the clip's faces at the edges;
    # as canvases the detector's input size (any detector), and as two pictures of the strips whole (YuNet takes any
    # size: what the sweep runs)
    plate, _ = next(iter(generate(ClipSpec(width=1280, height=720, frames=5, seed=33, faces=0, background="plate"))))
    yunet = detector("yunet")
    canvases = edge_canvases(plate, DEPTH, ZOOM, yunet.size, whole=whole)
    # 12 pieces of the top and bottom strips, 3 rows a canvas, 6 of the sides, 3 columns; whole: each pair at once
    assert [c.picture().shape[:2] for c in canvases] == [(384, 2560), (1440, 384)] if whole else len(canvases) == 6
    assert [f for c in canvases for f in edge_faces(yunet, c, plate.shape, EDGE_SCORE)] == []
    # frame 31 of the 720p clip of seed 31: a 43-px face wholly inside the right edge's strip, a few px from the edge;
    # the strip and its mirror image show it twice, and the model finds both (0.83), neither straddling the edge
    frame, truths = next(itertools.islice(generate(ClipSpec(width=1280, height=720, frames=40, seed=31)), 31, None))
    inside = next(t for t in truths if t.face == 102)
    assert inside.box[2] < frame.shape[1] and "edge" not in inside.notes
    canvases = edge_canvases(frame, DEPTH, ZOOM, yunet.size, whole=whole)
    assert [f for c in canvases for f in edge_faces(yunet, c, frame.shape, STRICT_LOW)] == []


def test_the_edge_strips_whole_find_the_face_below_the_edge_in_two_runs_as_the_canvases_do_in_six() -> None:
    # frame 0 of the 720p clip of seed 34 again: the face cut by the bottom edge, from the strips whole (YuNet takes a
    # picture of any size; 1.7x less time a frame than six 640-px canvases, docs/anonymiser.md) and from the canvases
    frame, truths = next(iter(generate(ClipSpec(width=1280, height=720, frames=40, seed=34))))
    cut = next(t for t in truths if t.face == 4)
    yunet = detector("yunet")
    for whole, runs in ((True, 2), (False, 6)):
        before = yunet.runs
        found = [
            face
            for canvas in edge_canvases(frame, DEPTH, ZOOM, yunet.size, whole=whole)
            for face in edge_faces(yunet, canvas, frame.shape, EDGE_SCORE)
        ]
        assert yunet.runs - before == runs
        assert _holds(found, cut) and all(f.box[1] < frame.shape[0] < f.box[3] for f in found if _near(f, cut))
    # a model that takes one input size only cannot run a picture larger than it
    with pytest.raises(ValueError, match="640-px input"):
        detector("scrfd").run_picture(np.zeros((384, 2560, 3), np.uint8), EDGE_SCORE)


def test_frames_scanned_ahead_two_at_a_time_give_the_faces_and_the_run_count_of_frames_swept_one_by_one() -> None:
    # a strict job's feed scans a batch's frames on the sweep's threads while its tracker takes them in order: the
    # model runs of two frames interleave, and each frame must still get its own schedule and every run be counted
    frames = [frame for frame, _ in generate(ClipSpec(width=1280, height=720, frames=4, seed=14))]
    alone = DetectionSweep(detector("yunet"), period=2)
    one_by_one = [alone.detect_frame(frame, STRICT_LOW, number=n) for n, frame in enumerate(frames)]
    ahead = DetectionSweep(detector("yunet"), period=2)
    scans = [ahead.scan_soon(frame, STRICT_LOW, number=n) for n, frame in enumerate(frames)]
    together = [ahead.finish(frame, scan.result(), STRICT_LOW) for frame, scan in zip(frames, scans, strict=True)]
    assert ahead.calls == alone.calls
    passes = DetectionSweep(detector("yunet"), period=2)
    for n, frame in enumerate(frames):
        passes.scan(frame, STRICT_LOW, number=n)
    assert passes.calls == 4 * 1 + 2 * (8 + 2 * (1 + 4) + 2)  # the close looks at the doubts are the rest
    assert alone.calls > passes.calls
    assert same_faces(together, one_by_one) >= 4


def test_a_forked_child_scans_ahead_after_its_parent_did() -> None:
    """A prefork worker forked after its parent scanned frames ahead gets a scan pool of its own: the parent's
    threads are not in the child, and a pool that believes it has them would never run a scan."""
    frame = next(generate(ClipSpec(width=640, height=360, frames=1, seed=14)))[0]
    sweep_ = DetectionSweep(detector("yunet"))
    expected = len(sweep_.scan_soon(frame, STRICT_LOW).result().found)
    answer = answer_of_forked_child(lambda: str(len(sweep_.scan_soon(frame, STRICT_LOW).result().found)))
    assert answer == str(expected), "the forked child's scan never ran"
