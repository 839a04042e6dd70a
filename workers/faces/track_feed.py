"""A chunk's frames with their faces decided by tracks, including frames the chunk reads but does not output.

Chunks render apart (on other machines, in any order), so a face track cannot be carried from one chunk to the
next. Instead each chunk also decodes a short look-behind (the frames before it) and look-ahead (the frames after
it), :func:`~workers.faces.tracking.context_frames` each: every decision about a frame reads only that many frames
either side (:mod:`workers.faces.tracking`), so a frame's faces are the same whatever chunk it falls in and
wherever the chunk's edges are. The context frames are detected and tracked, never output. The look-ahead is
detected frame by frame only until no later frame can change the chunk's frames
(:meth:`~workers.faces.tracking.FaceTracker.settled`: no track with a gap a later frame could close, no doubtful
face a later confident one could make count); a chain that reads no landmarks (``face_blur``) smooths none, and so
reads :data:`~workers.faces.tracking.MAX_SMOOTHING_RADIUS` frames fewer each side.

:class:`TrackFeed` turns the decoded batches (look-behind, then the chunk and its look-ahead) into
:class:`~workers.processors.base.Work` items for the chunk's frames only, each carrying its faces (``faces``:
every face the tracks give, filled-in ones too) and the faces the selector mode picks (``targets``). The frames wait
``context`` frames behind detection, so memory holds a few frames more, not the chunk.

Reference mode is decided per track: the first time a track's face is handed on, the mean cosine distance of
its detections seen so far (up to ``context`` frames ahead) to the reference decides, and the track keeps that
answer, so the chosen person does not flicker when one frame's embedding wobbles.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from shared.options import FaceOptions, JobOptions
from shared.strict_blur import (
    AROUND_SCORE,
    CUT_CORRELATION,
    EDGE_COAST,
    LAST_FRAMES,
    LOOK_BACK,
    STRICT_HIGH,
    STRICT_LOW,
    STRICT_REACH,
)
from workers.faces.detection import Face, FaceDetector
from workers.faces.look_back import look_back
from workers.faces.selection import cosine_distance, select_faces
from workers.faces.sweep import DetectionSweep
from workers.faces.targeting import FaceTargeter
from workers.faces.tracking import FaceTracker, TrackedFrame, context_frames
from workers.processors.base import FrameBatch, Work

__all__ = [
    "BOX_ONLY",
    "BatchDetection",
    "TrackFeed",
    "Thresholds",
    "lookbehind_frames",
    "reads_landmarks",
    "thresholds",
]

logger = logging.getLogger(__name__)

BatchDetection = Callable[[int, int, float], list[list[Face]]]
"""The faces of frames ``start:stop`` of one batch, at a score, found where the batch's frames already are (the
frames a torch back-end holds: :func:`workers.faces.device_detection.detection_on_feed`)."""

BOX_ONLY = frozenset({"face_blur"})
"""Face processors that read a face's box alone, never its landmarks: a chain of them skips landmark smoothing."""


def reads_landmarks(processors: Iterable[str]) -> bool:
    """Whether any face processor of the chain reads landmarks (``passthrough`` reads no face at all)."""
    return any(name not in BOX_ONLY and name != "passthrough" for name in processors)


def lookbehind_frames(options: JobOptions) -> int:
    """The frames a chunk of the job reads before its first one for its tracks (0: the job tracks no face)."""
    if not options.face.tracking or all(name == "passthrough" for name in options.processors):
        return 0
    smoothing = options.face.landmark_smoothing if reads_landmarks(options.processors) else 0.0
    return context_frames(options.face.track_gap, smoothing)


@dataclass(frozen=True)
class Thresholds:
    high: float
    low: float
    keep_doubtful: bool


def thresholds(options: FaceOptions, *, strict: bool) -> Thresholds:
    """The tracker's scores for a job: ``detector_score`` starts a track, ``track_score`` continues one; a
    strict anonymiser lowers both (never raises them) and keeps doubtful detections (:mod:`shared.strict_blur`)."""
    high = options.detector_score
    low = min(options.track_score, high)
    if strict:
        return Thresholds(min(high, STRICT_HIGH), min(low, STRICT_LOW), keep_doubtful=True)
    return Thresholds(high, low, keep_doubtful=False)


def thumbnail(frame: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    """A frame's 32×18 grey thumbnail, blurred and normalised to mean 0 and spread 1 (a flat frame: all 0)."""
    grey = cv2.cvtColor(np.ascontiguousarray(frame), cv2.COLOR_BGR2GRAY)
    height, width = grey.shape
    shrink = max(1, min(height, width) // 144)  # blurred on a picture area-averaged first: a third of the time at HD
    if shrink > 1:
        grey = cv2.resize(grey, (-(-width // shrink), -(-height // shrink)), interpolation=cv2.INTER_AREA)
    small = cv2.resize(
        cv2.GaussianBlur(grey, (0, 0), max(height, width) / 200 / shrink), (32, 18), interpolation=cv2.INTER_AREA
    )
    values = small.astype(np.float32)
    spread = float(values.std())
    return np.asarray((values - values.mean()) / spread if spread > 1.0 else np.zeros_like(values), np.float32)


def is_cut(previous: npt.NDArray[np.float32] | None, current: npt.NDArray[np.float32]) -> bool:
    """Whether two consecutive frames' :func:`thumbnail` s are a scene cut apart (:data:`CUT_CORRELATION`)."""
    if previous is None:
        return False
    return float((previous * current).mean()) < CUT_CORRELATION


class TrackFeed:
    """Detects and tracks the faces of a chunk's decoded frames, and yields the chunk's frames as work.

    Args:
        detector: finds the faces (run at the tracker's low threshold).
        targeter: the job's selector mode (``None``: every face is a target).
        options: the job's face options (tracking gap, thresholds, smoothing).
        strict: an anonymiser's thresholds (:func:`thresholds`), detection sweep
            (:class:`~workers.faces.sweep.DetectionSweep`: tiles at the scale ``blur_min_face`` needs and turned
            passes besides the plain one), tracks cut at scene cuts (:func:`is_cut`) and boxes coasted for up to
            ``track_gap`` frames after a track's last detection.
        second: strict mode's second detector (``face.strict_second_detector``), in the sweep.
        landmarks: whether a processor reads the faces' landmarks (off: they are not smoothed, and the context
            is :data:`~workers.faces.tracking.MAX_SMOOTHING_RADIUS` frames shorter at most).
        batch_size: frames per work item handed on.
        on_device: for a batch of the feed, its detection where its frames already are (the torch device's
            detector on the frames its feed holds on the device), or ``None``: ``detector`` on the host's frames.
            Not with ``strict`` (the sweep turns and enlarges the host's frames).
    """

    def __init__(
        self,
        detector: FaceDetector,
        targeter: FaceTargeter | None,
        options: FaceOptions,
        *,
        strict: bool = False,
        landmarks: bool = True,
        second: FaceDetector | None = None,
        batch_size: int = 8,
        on_device: Callable[[FrameBatch], BatchDetection | None] | None = None,
    ) -> None:
        self.detector, self.targeter = detector, targeter
        self.on_device = None if strict else on_device
        others = [second] if second is not None else []
        self.finder: FaceDetector | DetectionSweep = (
            DetectionSweep(detector, others=others, min_face=options.blur_min_face, period=options.blur_scan_period)
            if strict
            else detector
        )
        self.limits = thresholds(options, strict=strict)
        self.options = options
        self.batch_size = batch_size
        # Landmarks matter only to processors that align faces; a chain that reads boxes alone (face_blur) skips
        # their smoothing, and with it reads fewer frames each side.
        self.smoothing = options.landmark_smoothing if landmarks else 0.0
        self.context = context_frames(options.track_gap, self.smoothing)
        self.strict = strict
        self.detected_frames = 0  # frames detected, look-behind and look-ahead included
        self.cuts = 0  # scene cuts seen (strict mode)
        self._ending = 0  # strict mode: the video's last frames that run every pass (set by work)
        # reference mode reads the look-ahead's embeddings too, so it reads the whole look-ahead
        self._may_settle = targeter is None or targeter.mode != "reference"
        self._distances: dict[int, list[float]] = {}
        self._chosen: dict[int, bool] = {}

    def work(
        self, behind: Iterable[FrameBatch], batches: Iterable[FrameBatch], frames: int, *, origin: int = 0
    ) -> Iterator[Work]:
        """The chunk's ``frames`` frames as work items, in order.

        Args:
            behind: the look-behind: decoded frames before the chunk (context only; may be empty).
            batches: the chunk's frames, then any look-ahead frames (context only).
            frames: how many frames of ``batches`` the chunk outputs.
            origin: the number in the video of the first frame fed (the look-behind's first, else the chunk's): strict
                mode's scan schedule follows it, so where a chunk starts does not move the schedule.
        """
        tracker = FaceTracker(
            high=self.limits.high,
            low=self.limits.low,
            max_gap=self.options.track_gap,
            smoothing=self.smoothing,
            keep_doubtful=self.limits.keep_doubtful,
            coast=self.options.track_gap if self.strict else 0,
            reach=STRICT_REACH if self.strict else 0.0,
            edge_coast=EDGE_COAST if self.strict else 0,
            hold=LOOK_BACK + 2 if self.strict else 0,  # the look-back runs on a track's second detection
        )
        self._previous: npt.NDArray[np.float32] | None = None
        waiting: dict[int, np.ndarray] = {}
        pending: list[tuple[np.ndarray, TrackedFrame]] = []
        first = 0  # the tracker's index of the chunk's first frame
        fed = 0
        # strict mode runs every pass on the video's last frames: it counts the frames that follow each batch
        self._ending = ending = LAST_FRAMES * self.options.blur_scan_period if self.strict else 0
        followed = (("behind", ((b, ending) for b in behind)), ("chunk", _followed(batches, ending)))
        for role, source in followed:
            if role == "chunk":
                first = fed
            for batch, follow in source:
                tracker.frame = (int(batch.shape[2]), int(batch.shape[1]))
                # The look-ahead goes one frame at a time and stops as soon as no later frame can change the
                # chunk's frames (FaceTracker.settled): most chunk ends need few of its frames, or none.
                own = len(batch) if role == "behind" else max(0, min(len(batch), first + frames - fed))
                spans = [(0, own)] if own else []
                spans += [(i, i + 1) for i in range(own, len(batch))]
                for start, stop in spans:
                    ahead = role == "chunk" and fed - first >= frames
                    if ahead and self._may_settle and tracker.settled(first + frames - 1):
                        break
                    part = batch[start:stop]
                    self.detected_frames += len(part)
                    # the frames after the part (counted up to ``ending``), where the video ends within what is
                    # fed: fewer frames than the chunk and its look-ahead (the context asked of the decoder)
                    after = len(batch) - stop + follow
                    ends = role == "chunk" and fed - first - start + len(batch) + follow < frames + self.context
                    after = after if ends else ending
                    for frame, faces in self._faces(part, batch, start, stop, tracker, origin + fed, after):
                        if role == "chunk" and fed - first < frames:
                            waiting[fed] = frame
                        self._note(tracker.update(faces))
                        if self.strict:
                            assert isinstance(self.finder, DetectionSweep)
                            look_back(tracker, self.finder, waiting, max(self.limits.low, AROUND_SCORE))
                        fed += 1
                        pending.extend((waiting.pop(t.index), t) for t in tracker.ready() if t.index in waiting)
                        while len(pending) >= self.batch_size:
                            yield self._item(pending[: self.batch_size], first)
                            del pending[: self.batch_size]
                else:
                    continue
                break  # settled: the rest of the look-ahead is not read
        pending.extend((waiting.pop(t.index), t) for t in tracker.flush() if t.index in waiting)
        for start in range(0, len(pending), self.batch_size):
            yield self._item(pending[start : start + self.batch_size], first)

    def _faces(
        self,
        part: FrameBatch,
        batch: FrameBatch,
        start: int,
        stop: int,
        tracker: FaceTracker,
        number: int,
        after: int,
    ) -> Iterator[tuple[np.ndarray, list[Face]]]:
        """Each frame of ``part`` (``batch[start:stop]``) with its faces, frame by frame as the tracker goes in strict
        mode: a scene cut is told to the tracker first, and the sweep looks closely where the tracks expect their
        faces (``number``: the video's number of the part's first frame; ``after``: how many frames follow the part,
        counted as far as the video's last frames go, which run every pass: :data:`~shared.strict_blur.LAST_FRAMES`).
        """
        if not self.strict:
            yield from zip(part, self._detect(part, self._on_device(batch, start, stop)), strict=True)
            return
        assert isinstance(self.finder, DetectionSweep)
        sweep, starts = self.finder, []
        for frame in part:
            current = thumbnail(frame)
            starts.append(is_cut(self._previous, current))
            self._previous = current
        # the part's frames are scanned ahead, two at a time, while the tracker takes them in order; a frame that
        # starts a scene (the video's first, or a cut) and the video's last frames run every pass
        every = [cut or number + i == 0 or len(part) - i - 1 + after < self._ending for i, cut in enumerate(starts)]
        scans = [
            sweep.scan_soon(frame, self.limits.low, number=number + offset, every_pass=every[offset])
            for offset, frame in enumerate(part)
        ]
        try:
            for offset, frame in enumerate(part):
                if starts[offset]:
                    tracker.cut()
                    self.cuts += 1
                found = sweep.finish(frame, scans[offset].result(), self.limits.low, tracker.predicted())
                yield frame, self._embedded(part[offset : offset + 1], [found])[0]
        finally:
            for scan in scans:
                scan.cancel()  # a part left unfinished (an error): its frames not scanned yet are not

    def _on_device(self, batch: FrameBatch, start: int, stop: int) -> list[list[Face]] | None:
        """The faces of ``batch[start:stop]`` found where its frames already are, or ``None``. Asked per part, so
        that nothing here holds a batch's device frames while the work waits (a look-behind's are let go)."""
        detect = self.on_device(batch) if self.on_device is not None else None
        return detect(start, stop, self.limits.low) if detect is not None else None

    def _detect(self, batch: FrameBatch, found: list[list[Face]] | None = None) -> list[list[Face]]:
        """The faces of ``batch`` (``found`` already, or found here on its frames), with their embeddings in
        reference mode."""
        detected = found if found is not None else self.finder.detect(batch, score=self.limits.low)
        return self._embedded(batch, detected)

    def _embedded(self, batch: FrameBatch, detected: list[list[Face]]) -> list[list[Face]]:
        """``detected`` with their embeddings in reference mode (as found elsewhere)."""
        if self.targeter is not None and self.targeter.mode == "reference":
            assert self.targeter.embedder is not None
            detected = self.targeter.embedder.embed_frames(batch, detected)
        return detected

    def _note(self, placed: list[Face]) -> None:
        """Collect each track's distances to the reference (reference mode only)."""
        targeter = self.targeter
        if targeter is None or targeter.mode != "reference" or targeter.reference is None:
            return
        for face in placed:
            if face.embedding is not None and face.track is not None:
                distance = float(cosine_distance(face.embedding, targeter.reference)[0])
                self._distances.setdefault(face.track, []).append(distance)

    def _targets(self, faces: list[Face]) -> list[Face]:
        targeter = self.targeter
        if targeter is None:
            return faces
        if targeter.mode != "reference":
            return select_faces(faces, targeter.mode)
        chosen = []
        for face in faces:
            assert face.track is not None
            if face.track not in self._chosen:
                distances = self._distances.get(face.track, [])
                self._chosen[face.track] = bool(distances) and float(np.mean(distances)) <= targeter.max_distance
            if self._chosen[face.track]:
                chosen.append(face)
        return chosen

    def _item(self, frames: list[tuple[np.ndarray, TrackedFrame]], first: int) -> Work:
        """A batch of the chunk's frames (``first``: the tracker's number of the chunk's first frame)."""
        batch = np.stack([frame for frame, _ in frames])
        faces = [tracked.faces for _, tracked in frames]
        return Work(batch, faces=faces, targets=[self._targets(f) for f in faces], first=frames[0][1].index - first)


def _followed(batches: Iterable[FrameBatch], need: int) -> Iterator[tuple[FrameBatch, int]]:
    """Each batch with the number of frames that follow it, counted up to ``need`` (``need`` or more: at least that
    many): it reads up to ``need`` frames past the batch it hands on. ``need`` 0: the batches as they come, with 0."""
    if need <= 0:
        yield from ((batch, 0) for batch in batches)
        return
    held: deque[FrameBatch] = deque()
    after = 0  # the frames held behind the first batch held
    for batch in batches:
        held.append(batch)
        after += len(batch) if len(held) > 1 else 0
        while len(held) > 1 and after >= need:
            yield held.popleft(), after
            after -= len(held[0])
    while held:
        head = held.popleft()
        yield head, sum(len(b) for b in held)
