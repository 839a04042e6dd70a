"""Face tracks: detections associated across frames, gaps filled, landmarks smoothed — pure numpy.

ByteTrack's two-stage association (Zhang et al., 2022) with a constant-velocity motion model: each frame, the
confident detections (``score ≥ high``) are matched first to the tracks' predicted boxes by IoU, then the
doubtful ones (``low ≤ score < high``) to the tracks still unmatched. Matching is greedy by IoU, highest first,
ties broken by track and detection order, so the same detections always give the same tracks.

What differs from ByteTrack, and why: chunks of a video are tracked separately, each with a short look-behind and
look-ahead (``context`` frames), and the result must not depend on where the chunk edges fall. So every decision
about frame ``t`` reads only frames ``t - context … t + context`` (an anonymiser's ``edge_coast`` reads further back):

* an unmatched doubtful detection still opens a (tentative) chain, and a chain counts at frame ``t`` only when
  it holds a confident detection within ``context`` frames of ``t`` ("start high, continue low", made local);
* a gap of at most ``max_gap`` frames between two detections of a track is filled by interpolating the box and
  the landmarks linearly (the filled face is marked ``filled``);
* landmarks are smoothed along the track with a symmetric Gaussian window of at most
  :data:`MAX_SMOOTHING_RADIUS` frames each side (symmetric, so steady motion is not delayed).

The tracker is fed frame by frame (:meth:`FaceTracker.update`) and hands back each frame once ``context`` later
frames have been seen (:meth:`FaceTracker.ready`), or at the end (:meth:`FaceTracker.flush`).

Example:
    >>> tracker = FaceTracker(high=0.5, low=0.25, max_gap=4)   # doctest: +SKIP
    >>> for faces in detections_per_frame:                      # doctest: +SKIP
    ...     tracker.update(faces)
    ...     for frame in tracker.ready(): use(frame.faces)
    >>> for frame in tracker.flush(): use(frame.faces)          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from shared.strict_blur import COAST_BASE
from workers.faces.association import box_iou, bridge_to, leaving_frame, match_nearby, match_overlapping
from workers.faces.detection import Face
from workers.faces.smoothing import MAX_SMOOTHING_RADIUS, context_frames, smoothed, smoothing_radius

__all__ = ["MAX_SMOOTHING_RADIUS", "FaceTracker", "TrackedFrame", "box_iou", "context_frames", "smoothing_radius"]

FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True)
class TrackedFrame:
    """One frame's faces as the tracks see them.

    Attributes:
        index: the frame's number in the order frames were fed, from 0.
        faces: the faces to work on, each with its ``track`` id; filled-in faces have ``filled`` set.
        detected: every face the detector found at or above the low threshold, whatever the tracks say.
    """

    index: int
    faces: list[Face]
    detected: list[Face]


@dataclass
class _Track:
    ident: int
    frames: dict[int, Face] = field(default_factory=dict)  # observed faces by frame
    last: int = -1
    velocity: FloatArray = field(default_factory=lambda: np.zeros(4, np.float32))
    sure: int = -(10**9)  # the frame of its latest confident detection

    def observe(self, index: int, face: Face) -> None:
        if self.last >= 0:
            previous = self.frames[self.last].box
            step = (face.box - previous) / float(index - self.last)
            # a new track's first step is taken as it is; later ones are blended (one jittery box flings nothing)
            self.velocity = step if len(self.frames) == 1 else 0.5 * self.velocity + 0.5 * step
        self.frames[index] = face
        self.last = index

    def predict(self, index: int) -> FloatArray:
        return np.asarray(self.frames[self.last].box + self.velocity * float(index - self.last), np.float32)


class FaceTracker:
    """Associates each frame's detections with tracks, and hands frames back with their faces decided.

    Args:
        high: a detection at or above it is confident: it opens a track, and makes its chain count.
        low: detections below it are dropped; between ``low`` and ``high`` they continue a chain.
        max_gap: the most frames without a detection that are filled by interpolation (0: none).
        smoothing: the landmark smoothing strength, 0 (none) … 1 (a window of :data:`MAX_SMOOTHING_RADIUS`
            frames each side).
        keep_doubtful: hand back doubtful detections even outside a counted chain (an anonymiser's choice: a face
            the detector doubts is still hidden).
        reach: where more than 0, a detection no track's predicted box overlaps joins the track whose predicted box
            is nearest, within ``reach`` face sizes centre to centre and of a size within half to twice its own (an
            anonymiser's choice: a small fast face moves further than its size between frames).
        coast: frames after a track's last detection that its box, carried on by its motion over its last
            :data:`~shared.strict_blur.COAST_BASE` detections, is still handed back (``filled`` and ``lost``) where no
            later detection fills the gap, and frames before its first detection that its box, carried back, is
            handed back (``filled``): an anonymiser's choice, so a face leaving the frame or lost stays hidden, and
            one entering or appearing after a jump is hidden before it is found (0: none; at most ``max_gap``).
        edge_coast: a lost track whose last box reached an edge of the frame (:attr:`frame`, set by the caller),
            its side there moving out across it, found confidently within ``context`` frames of its last detection,
            is carried on for up to this many frames (if more than ``coast``) while its box still reaches into it.
        hold: frames fed before a frame is handed back, where more than ``context``: room to look back further from a
            new track's first detection (:meth:`observe_before`; an anonymiser's choice).

    Raises:
        ValueError: thresholds out of order or out of range.
    """

    def __init__(
        self,
        *,
        high: float,
        low: float,
        max_gap: int = 4,
        smoothing: float = 0.0,
        keep_doubtful: bool = False,
        coast: int = 0,
        reach: float = 0.0,
        edge_coast: int = 0,
        hold: int = 0,
    ) -> None:
        if not 0.0 < low <= high <= 1.0:
            raise ValueError(f"tracker thresholds must satisfy 0 < low ≤ high ≤ 1, got low={low}, high={high}")
        if max_gap < 0 or not 0.0 <= smoothing <= 1.0:
            raise ValueError("max_gap must be ≥ 0 and smoothing within 0…1")
        self.high, self.low, self.max_gap, self.keep_doubtful = high, low, max_gap, keep_doubtful
        self.radius = smoothing_radius(smoothing)
        self.coast, self.reach = max(0, min(coast, max_gap)), max(0.0, reach)
        self.edge_coast = max(self.coast, edge_coast)
        self.frame: tuple[int, int] | None = None  # (width, height) of the frames fed: where their edges are
        self._cuts: list[int] = []  # frames that start a new scene (:meth:`cut`)
        self.context = context_frames(max_gap, smoothing)
        self.hold = max(self.context, hold)
        self._tracks: list[_Track] = []
        self._detected: dict[int, list[tuple[Face, int]]] = {}  # frame -> (face, track id)
        self._by_id: dict[int, _Track] = {}
        self._next_id = 0
        self._fed = 0
        self._done = 0

    def cut(self) -> None:
        """The next frame fed starts a new scene: no track carries on into it (no association, no gap filled and no
        box coasted across the cut), so one scene's motion never moves a box in the next."""
        self._cuts.append(self._fed)

    def _scene_start(self, index: int) -> int:
        """The first frame of ``index``'s scene (0 before any cut)."""
        return max((c for c in self._cuts if c <= index), default=0)

    def update(self, faces: Sequence[Face]) -> list[Face]:
        """Feed the next frame's detections (any score); returns those at or above ``low``, each with its track."""
        index = self._fed
        self._fed += 1
        start = self._scene_start(index)
        live = [t for t in self._tracks if index - t.last <= self.context and t.last >= start]
        candidates = [face for face in faces if face.score >= self.low]
        confident = [i for i, face in enumerate(candidates) if face.score >= self.high]
        doubtful = [i for i, face in enumerate(candidates) if face.score < self.high]
        assigned: dict[int, _Track] = {}
        free = list(live)
        stages = [(group, self._match) for group in (confident, doubtful)]
        if self.reach:
            stages.append((list(range(len(candidates))), self._near))
        for group, match in stages:
            group = [i for i in group if i not in assigned]
            pairs = match(index, [candidates[i] for i in group], free)
            for det, track in pairs:
                assigned[group[det]] = track
            matched = {id(track) for _, track in pairs}
            free = [t for t in free if id(t) not in matched]
        placed: list[tuple[Face, int]] = []
        for i, face in enumerate(candidates):
            found = assigned.get(i)
            if found is None:
                track = _Track(self._next_id)
                self._next_id += 1
                self._tracks.append(track)
                self._by_id[track.ident] = track
            else:
                track = found
            track.observe(index, face)
            track.sure = index if face.score >= self.high else track.sure
            placed.append((face, track.ident))
        self._detected[index] = placed
        return [replace(face, track=ident) for face, ident in placed]

    def _near(self, index: int, faces: Sequence[Face], tracks: Sequence[_Track]) -> list[tuple[int, _Track]]:
        if not faces or not tracks:
            return []
        predicted = np.stack([t.predict(index) for t in tracks])
        pairs = match_nearby(np.stack([f.box for f in faces]), predicted, self.reach)
        return [(det, tracks[trk]) for det, trk in pairs]

    def newly_moving(self) -> list[tuple[int, int, FloatArray, FloatArray]]:
        """The tracks whose second detection was in the frame just fed (so their motion is known now): each as its
        id, its first detection's frame, that detection's box and its motion per frame."""
        index = self._fed - 1
        found = []
        for track in self._tracks:
            if len(track.frames) == 2 and track.last == index:
                first = min(track.frames)
                found.append((track.ident, first, track.frames[first].box, track.velocity.copy()))
        return found

    def newly_bridged(self, reach: float, gap: int) -> list[tuple[int, int, FloatArray, int, FloatArray]]:
        """The tracks whose first detection was in the frame just fed, each bridged to a track of its scene whose last
        detection is 2 to ``gap`` + 1 frames before it (:func:`~workers.faces.association.bridge_to`): a small fast
        face the strict passes find on alternate frames starts a track at each detection, too far from the last
        one to join it. Each as the new track's id, frame and box, and the other's last frame and box."""
        index = self._fed - 1
        new = [t for t in self._tracks if len(t.frames) == 1 and t.last == index]
        lost = [t for t in self._tracks if 2 <= index - t.last <= gap + 1 and t.last >= self._scene_start(index)]
        if not new or not lost:
            return []
        olds = np.stack([t.frames[t.last].box for t in lost])
        nearest = bridge_to(np.stack([t.frames[index].box for t in new]), olds, [index - t.last for t in lost], reach)
        pairs = [(t, lost[k]) for t, k in zip(new, nearest, strict=True) if k is not None]
        return [(t.ident, index, t.frames[index].box.copy(), o.last, o.frames[o.last].box.copy()) for t, o in pairs]

    def observe_before(self, ident: int, index: int, face: Face) -> bool:
        """Add a detection of track ``ident`` in an earlier frame not decided yet (found by looking back from the
        track's first detections), as if the detector had found it there; ``False`` where that frame is decided
        already, or in another scene than the track's."""
        track = self._by_id.get(ident)
        if track is None or index < self._done or index in track.frames:
            return False
        if self._scene_start(index) != self._scene_start(min(track.frames)):
            return False
        track.frames[index] = face
        self._detected.setdefault(index, []).append((face, ident))
        return True

    def predicted(self) -> list[FloatArray]:
        """Where the tracks that may still go on expect their faces in the next frame fed (their boxes carried on
        by their motion), most recently seen first: the boxes an anonymiser looks at closely."""
        index = self._fed
        start = self._scene_start(index)
        live = [t for t in self._tracks if t.frames and t.last >= start and index - t.last <= self.max_gap + 1]
        live.sort(key=lambda t: -t.last)
        return [t.predict(index) for t in live]

    def _match(self, index: int, faces: Sequence[Face], tracks: Sequence[_Track]) -> list[tuple[int, _Track]]:
        if not faces or not tracks:
            return []
        predicted = np.stack([t.predict(index) for t in tracks])
        return [(det, tracks[trk]) for det, trk in match_overlapping(np.stack([f.box for f in faces]), predicted)]

    def ready(self) -> Iterator[TrackedFrame]:
        """The frames whose faces are decided: every frame with ``hold`` later frames fed, in order."""
        while self._done + self.hold < self._fed:
            yield self._decide(self._done)

    def flush(self) -> Iterator[TrackedFrame]:
        """Every frame not handed back yet (after the last :meth:`update`)."""
        while self._done < self._fed:
            yield self._decide(self._done)

    def settled(self, last: int) -> bool:
        """Whether no frame fed from now on can change what is decided about the frames up to ``last`` (a chunk's
        last frame): then the rest of a look-ahead need not be detected at all.

        A later detection changes an earlier frame only by bridging a gap of a track (a filled face), by making a
        doubtful chain count (a confident detection within ``context``), or through the smoothing window; and a
        detection joins no track it could not join had every frame been read, since association runs in order.
        """
        index = self._fed  # the next frame that would be fed
        if index > last + self.context:
            return True
        if self.coast and index - max(self.coast, self.hold - 1) <= last:
            return False  # a face first found in the next frame would be carried back into the chunk's last frames
        if self.radius > 0:
            return False
        for track in self._tracks:
            if track.last < last and index - track.last - 1 <= self.max_gap:
                return False  # a gap into the chunk's last frames that the next frame could still close
            if not self.keep_doubtful:
                for frame in range(max(self._done, index - self.context), last + 1):
                    if self._at(track, frame) is not None and not self._counts(track, frame):
                        return False  # a doubtful face a confident one ahead would make count
        return True

    def _counts(self, track: _Track, index: int) -> bool:
        """Whether the track's chain holds a confident detection within ``context`` frames of ``index``."""
        return any(
            abs(frame - index) <= self.context and face.score >= self.high for frame, face in track.frames.items()
        )

    def _at(self, track: _Track, index: int) -> Face | None:
        """The track's face at ``index``: observed, or interpolated across a gap of at most ``max_gap``."""
        observed = track.frames.get(index)
        if observed is not None:
            return observed
        before = [f for f in track.frames if index - self.max_gap - 1 <= f < index]
        after = [f for f in track.frames if index < f <= index + self.max_gap + 1]
        if not before or not after:
            return None
        a, b = max(before), min(after)
        if b - a - 1 > self.max_gap or self._scene_start(a) != self._scene_start(b):
            return None
        start, end = track.frames[a], track.frames[b]
        weight = np.float32((index - a) / (b - a))
        return Face(
            box=np.asarray(start.box + (end.box - start.box) * weight, np.float32),
            landmarks=np.asarray(start.landmarks + (end.landmarks - start.landmarks) * weight, np.float32),
            score=min(start.score, end.score),
            track=track.ident,
            filled=True,
        )

    def _coasted(self, track: _Track, index: int) -> Face | None:
        """The track's box carried past its detections by its motion, within :attr:`coast` frames and the same
        scene: on after its last detection (a face lost, or leaving the frame), and back before its first (a face
        entering the frame, or appearing where it jumped to, before the detector found it); ``None`` elsewhere."""
        if not self.coast:
            return None
        before = sorted(f for f in track.frames if f < index)
        after = sorted(f for f in track.frames if f > index)
        if before and not after:
            ends, lost = before[-1:] + before[-COAST_BASE:-1][:1], True
        elif after and not before:
            ends, lost = after[:1] + after[1:COAST_BASE][-1:], False
        else:
            return None
        end = ends[0]
        if self._scene_start(index) != self._scene_start(end):
            return None
        face = track.frames[end]
        step = np.zeros(4, np.float32)
        if len(ends) > 1:
            step = (face.box - track.frames[ends[1]].box) / float(end - ends[1])
        # a box carried on (either way) may grow with its face, never shrink: a face cut by the edge shows less of it
        centre, grow = (step[:2] + step[2:]) / 2, (step[2:] - step[:2]) / 2
        grow = np.maximum(grow, 0.0) if lost else np.minimum(grow, 0.0)
        step = np.concatenate([centre - grow, centre + grow])
        shift = step * float(index - end)
        x1, y1, x2, y2 = (float(v) for v in face.box + shift)
        reaches_in = self.frame is not None and x1 < self.frame[0] and x2 > 0 and y1 < self.frame[1] and y2 > 0
        if abs(index - end) > self.coast and not (lost and index - end <= self._horizon(track) and reaches_in):
            return None
        box, points = np.asarray(face.box + shift, np.float32), face.landmarks + (shift[:2] + shift[2:]) / 2
        return Face(
            box=box, landmarks=points.astype(np.float32), score=face.score, track=track.ident, filled=True, lost=lost
        )

    def _horizon(self, track: _Track) -> int:
        """How long after its last detection a track may hand back a face: longer where it moved out of the frame."""
        if self.edge_coast <= self.coast or self.frame is None or track.last < 0:
            return self.max_gap
        box = track.frames[track.last].box
        leaving = leaving_frame(box, box - track.frames[min(sorted(track.frames)[-COAST_BASE:])].box, self.frame)
        sure = track.last - track.sure <= self.context  # and a face, not a false alarm: found confidently lately
        return max(self.edge_coast, self.max_gap) if leaving and sure else self.max_gap

    def _smoothed(self, track: _Track, index: int, face: Face) -> Face:
        return smoothed(face, index, self.radius, lambda frame: self._at(track, frame))

    def _decide(self, index: int) -> TrackedFrame:
        detected = self._detected.pop(index, [])
        faces: list[Face] = []
        seen: set[int] = set()
        for face, ident in detected:
            track = self._by_id[ident]
            seen.add(ident)
            if face.score >= self.high or self._counts(track, index) or self.keep_doubtful:
                faces.append(self._smoothed(track, index, replace(face, track=ident)))
        for track in self._tracks:
            if track.ident in seen or not track.frames or track.last < index - self._horizon(track):
                continue
            filled = self._at(track, index) or self._coasted(track, index)
            if filled is not None and (self._counts(track, index) or self.keep_doubtful):
                faces.append(self._smoothed(track, index, filled))
        self._done = index + 1
        self._forget(index)
        return TrackedFrame(index, faces, [replace(face, track=ident) for face, ident in detected])

    def _forget(self, index: int) -> None:
        """Drop what no later decision reads: observations more than ``context`` frames behind ``index``."""
        horizon = index - self.context
        for track in self._tracks:
            kept = sorted(track.frames)[-COAST_BASE:] if index - track.last < self._horizon(track) else []
            for frame in [f for f in track.frames if f < horizon and f not in kept]:
                del track.frames[frame]
        self._tracks = [t for t in self._tracks if t.frames]
        older = [c for c in self._cuts if c < horizon]  # the last of them still starts the oldest frames' scene
        self._cuts = older[-1:] + [c for c in self._cuts if c >= horizon]
        self._by_id = {t.ident: t for t in self._tracks}
