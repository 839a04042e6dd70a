"""The tracked feed of a chunk (workers/faces/track_feed.py) on real clips with the real detector and embedder: the
person chosen in reference mode stays chosen along a track, and a frame's faces do not depend on the chunk edges."""

from __future__ import annotations

import numpy as np
import pytest

from shared.options import FaceOptions
from tests.support.faces import MODELS, clip_frames, detector, engine
from workers.faces.recognition import FaceEmbedder
from workers.faces.selection import select_faces
from workers.faces.targeting import FaceTargeter
from workers.faces.track_feed import TrackFeed

pytestmark = pytest.mark.slow  # both tests spend over 5 CPU-s


def _embedder() -> FaceEmbedder:
    model = engine(MODELS / "mobilefacenet_128.onnx")
    return FaceEmbedder(model, fixed_batch=model.fixed_batch(model.input_names[0]))


def _batches(frames: np.ndarray, size: int = 8) -> list[np.ndarray]:
    return [frames[i : i + size] for i in range(0, len(frames), size)]


def test_reference_choice_is_made_per_track_and_never_switches_within_it() -> None:
    frames = clip_frames("d20.mp4")
    embedder, finder = _embedder(), detector("yunet")
    first = embedder.embed_faces(frames[0], finder.detect_frame(frames[0]))
    reference = max(first, key=lambda f: f.area).embedding  # the person in front, from the clip's first frame
    assert reference is not None and len(first) == 2  # and someone else at the edge
    # a tight distance, where one frame's embedding wobbles across it
    targeter = FaceTargeter(finder, "reference", embedder=embedder, reference=reference, max_distance=0.25)
    options = FaceOptions(selector_mode="reference", reference_distance=0.25)
    work = list(TrackFeed(finder, targeter, options).work((), _batches(frames), len(frames)))
    chosen: dict[int, set[bool]] = {}
    targeted = 0
    for item in work:
        assert item.faces is not None and item.targets is not None
        for faces, targets in zip(item.faces, item.targets, strict=True):
            picked = {id(face) for face in targets}
            targeted += len(targets)
            for face in faces:
                assert face.track is not None
                chosen.setdefault(face.track, set()).add(id(face) in picked)
    assert all(len(states) == 1 for states in chosen.values()), chosen
    assert targeted >= len(frames) - 2  # the person in front, in (nearly) every frame
    # frame by frame (what selection did before tracks), the same person drops in and out
    per_frame = [
        select_faces(faces, "reference", reference=reference, max_distance=0.25)
        for faces in embedder.embed_frames(frames, finder.detect(frames))
    ]
    switches = sum((len(a) > 0) != (len(b) > 0) for a, b in zip(per_frame, per_frame[1:], strict=False))
    assert switches > 0


def test_a_frame_gets_the_same_faces_whatever_chunk_it_falls_in() -> None:
    frames = clip_frames("crowd_1080p.mp4", slice(75, 105))
    options = FaceOptions()
    feed = TrackFeed(detector("yunet"), None, options)
    context = feed.context

    def faces_of(start: int, stop: int) -> list[list[tuple[float, ...]]]:
        lo, hi = max(0, start - context), min(len(frames), stop + context)
        work = TrackFeed(detector("yunet"), None, options).work(
            _batches(frames[lo:start]), _batches(frames[start:hi]), stop - start
        )
        return [
            sorted(tuple(np.round(f.box, 2)) for f in item_faces) for item in work for item_faces in item.faces or []
        ]

    whole = faces_of(0, len(frames))
    pieces = [face for start in range(0, len(frames), 7) for face in faces_of(start, min(start + 7, len(frames)))]
    assert pieces == whole
