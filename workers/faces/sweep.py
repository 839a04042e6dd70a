"""An anonymiser's detection sweep: the whole frame, the frame in tiles at the scale its smallest face needs, and the
frame turned both ways.

Detectors are trained on upright faces a few dozen pixels tall and more: YuNet's score for a face turned 30–40°
in-plane, or under about :data:`~shared.strict_blur.RELIABLE_FACE` px tall in its input, falls from about 0.8 to
under 0.1 (measured on faces cut from the reference images). A 1280-px frame shrunk into a 640-px input halves every
face, so an anonymiser's sweep also detects:

* the frame in tiles of the model's input (``face.detector_size``'s tiling, :meth:`FaceDetector.detect_frame`) at
  the scale where ``min_face`` source pixels are :data:`~shared.strict_blur.RELIABLE_FACE` detector pixels: at
  native resolution, enlarged or shrunk as that asks (in one run, where the model takes any size and the passes are
  not shared out over frames: shared, tiles that overlap are seen on every frame where one picture would be seen
  every other);
* the frame turned by ±:data:`TURN` degrees (a face turned by up to 40° is then within 10–15° of upright in one of
  them), tiled for faces :data:`~shared.strict_blur.TURN_MIN_FACE_FACTOR` times ``min_face``;
* the frame's four edges, each strip mirrored outward and enlarged (:mod:`workers.faces.edges`), for faces cut by the
  frame's edge with most of them outside it;
* with a second detector, the upright tiles again with it (its faces kept where the job's detector found none).

What every pass finds is mapped back into the frame and merged by NMS. A face found on a turned frame keeps its
landmarks (turned back exactly) and gets an upright box of the same size around the same centre. :attr:`calls`
counts the model runs, every pass and tile included. The passes that need no track (:meth:`DetectionSweep.scan`) run
ahead of the tracker, two frames at a time (:meth:`DetectionSweep.scan_soon`); the close looks around the tracks'
boxes run as the tracker reaches the frame (:meth:`DetectionSweep.finish`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from shared.strict_blur import (
    AROUND_NEW_IOU,
    AROUND_SCORE,
    CONFIRM_BELOW,
    CONFIRM_FROM,
    CONFIRM_MOST,
    DOUBT_FLOOR,
    DOUBTFUL_MOST,
    EDGE_DEPTH,
    EDGE_FACE,
    EDGE_SCORE,
    MIN_FACE,
    RELIABLE_FACE,
    SECOND_MIN_FACE,
    SECOND_SCORE,
    STRICT_HIGH,
    TURN,
    TURN_MIN_FACE_FACTOR,
    ZOOM,
    ZOOM_UP_TO,
)
from workers.faces.association import box_iou
from workers.faces.close_looks import confirmed, doubts_to_look_at, look_around, mapped, overlaps
from workers.faces.detection import Face, FaceDetector, suppress_faces
from workers.faces.edges import edge_canvases, edge_faces
from workers.faces.tiling import TILE_OVERLAP, scan_pool, seen_at

__all__ = ["TURN", "ZOOM", "ZOOM_UP_TO", "DetectionSweep"]  # the numbers live in shared.strict_blur

Frame = npt.NDArray[np.uint8]


def _round32(value: float) -> int:
    return int(math.ceil(value / 32) * 32)


class DetectionSweep:
    """Detects with ``detector`` on several views of each frame and merges the faces found.

    Args:
        detector: the job's detector (its ``detector_size`` is honoured in the whole-frame pass).
        turns: the angles (degrees) of the extra turned passes.
        others: more detectors (``face.strict_second_detector``), each run on the upright tiles (on the whole
            frame where it needs none: at the low score, SCRFD's whole-frame pass found boxes as large as a 1080p
            frame): the faces they find at :data:`~shared.strict_blur.SECOND_SCORE` or more, and at least
            :data:`~shared.strict_blur.SECOND_MIN_FACE` of ``min_face`` tall, where the job's detector found none are
            added, whatever the models' scores disagree on.
        min_face: the smallest face to find (box height, px at the source resolution: ``face.blur_min_face``).
        period: the extra passes (tiles, turned frames, edges) are shared out over this many consecutive frames, each
            frame running every ``period``-th of their model runs (``face.blur_scan_period``; 1: all of them on every
            frame). The whole-frame passes and the checks around the tracks' faces (:meth:`detect_frame`'s
            ``around``) run on every frame.
    """

    def __init__(
        self,
        detector: FaceDetector,
        *,
        turns: Sequence[float] = (TURN, -TURN),
        others: Sequence[FaceDetector] = (),
        min_face: float = MIN_FACE,
        period: int = 1,
    ) -> None:
        self.detector = detector
        self.turns = tuple(turns)
        self.others = tuple(others)
        self.min_face = float(min_face)
        self.period = max(1, int(period))
        self._runs_before = sum(model.runs for model in (detector, *self.others))

    @property
    def calls(self) -> int:
        """The model runs made since this sweep was made, every detector, pass and tile."""
        return sum(model.runs for model in (self.detector, *self.others)) - self._runs_before

    def detect(
        self, frames: npt.NDArray[np.uint8] | Sequence[Frame], score: float | None = None, *, first: int = 0
    ) -> list[list[Face]]:
        """The faces of each frame, one list per frame, in order (``first``: the first frame's number in the video,
        which sets the schedule's phase)."""
        return [self.detect_frame(frame, score, number=first + i) for i, frame in enumerate(frames)]

    def detect_frame(
        self,
        frame: Frame,
        score: float | None = None,
        *,
        number: int = 0,
        around: Sequence[npt.NDArray[np.float32]] = (),
        every_pass: bool = False,
    ) -> list[Face]:
        """The faces of one frame found by any pass, merged (highest score first).

        Args:
            frame: BGR.
            score: the least score kept (default: the detector's).
            number: the frame's number in the video: with a ``period``, it picks the share of the extra passes'
                runs this frame makes (so where a chunk starts does not move the schedule).
            around: boxes where faces are expected (the tracks' predicted boxes): each is looked at closely, upright
                and turned both ways (:meth:`look_around`), so a tracked face the passes miss in this frame is found.
            every_pass: run every extra pass whatever the period (a frame that starts a scene: no track is there
                yet to look closely at, and a face shown only briefly would otherwise wait for its share).
        """
        threshold = self.detector.score if score is None else score
        return self.finish(frame, self.scan(frame, threshold, number=number, every_pass=every_pass), threshold, around)

    def scan(self, frame: Frame, threshold: float, *, number: int = 0, every_pass: bool = False) -> Scan:
        """The passes of :meth:`detect_frame` that need no track (every model run but the close looks), at
        ``threshold``, and what they scored from :data:`~shared.strict_blur.DOUBT_FLOOR` up to it (the faces
        :meth:`finish` looks at closely); safe to run for several frames at once, on other threads
        (:meth:`scan_soon`)."""
        scale = RELIABLE_FACE / self.min_face
        phase = number % self.period
        due = itertools.repeat(True) if every_pass else (i % self.period == phase for i in itertools.count())
        floor = min(threshold, DOUBT_FLOOR)
        found = self.detector.detect_frame(frame, floor)
        found += self._tiled(self.detector, frame.shape, _resized(frame), scale, floor, due)
        for angle in self.turns:
            found += self._turned(frame, angle, scale / TURN_MIN_FACE_FACTOR, floor, due)
        found += self._edges(frame, threshold, due)
        # a doubtful face taller than a share of the frame is the shrunk whole frame's false alarm (a real face that
        # large scores high, and where it did in another frame its track fills this one)
        tallest = DOUBTFUL_MOST * frame.shape[0]
        found = [f for f in found if f.score >= STRICT_HIGH or float(f.box[3] - f.box[1]) <= tallest]
        sure = max(threshold, SECOND_SCORE)
        others = []
        for model in self.others:
            if _tiles_needed(model, frame.shape, scale):
                more = self._tiled(model, frame.shape, _resized(frame), scale, sure, due)
            else:
                more = model.detect_frame(frame, sure)
            tall = SECOND_MIN_FACE * self.min_face
            others.append([face for face in more if float(face.box[3] - face.box[1]) >= tall])
        merged = suppress_faces(found, floor)  # NMS: a face's lower-scored boxes never suppress it
        sure_faces = [face for face in merged if face.score >= threshold]
        return Scan(sure_faces, others, [face for face in merged if face.score < threshold])

    def scan_soon(self, frame: Frame, threshold: float, *, number: int = 0, every_pass: bool = False) -> Future[Scan]:
        """:meth:`scan` on the sweep's threads (:func:`~workers.faces.tiling.scan_pool`, two frames at a time): a
        frame's passes run while the tracker takes the frames before it, and two frames' Python work and model runs
        overlap (docs/performance.md)."""
        return scan_pool().submit(self.scan, frame, threshold, number=number, every_pass=every_pass)

    def finish(
        self, frame: Frame, scan: Scan, threshold: float, around: Sequence[npt.NDArray[np.float32]] = ()
    ) -> list[Face]:
        """A frame's faces from its :meth:`scan` and the close looks ``around`` the tracks' predicted boxes and at
        the scan's doubts no track expects and no pass found better (up to :data:`~shared.strict_blur.DOUBTS_MOST`,
        the highest scored), merged (highest score first)."""
        found = list(scan.found)
        # the close looks' faces, then the other detectors', add the faces the passes missed; where the job's
        # detector found one, its box stands (two boxes of one face that overlap too little for NMS would widen what is
        # hidden, and another model's box of a face cut by the frame's edge or turned covers less of it)
        close, sure = max(threshold, AROUND_SCORE), max(threshold, SECOND_SCORE)
        found = self._confirmed(frame, found, around, close)
        doubts = doubts_to_look_at(scan.doubts, [*around, *(face.box for face in found)])
        self._add_new(found, self.look_around(frame, [*around, *doubts], close), close)
        for more in scan.others:
            self._add_new(found, more, sure)
        return sorted(found, key=lambda face: -face.score)

    def _confirmed(
        self, frame: Frame, found: list[Face], around: Sequence[npt.NDArray[np.float32]], threshold: float
    ) -> list[Face]:
        """``found`` without its large faces scored under :data:`~shared.strict_blur.CONFIRM_BELOW`, where no track
        expects one, that a close look at ``threshold`` does not find again (the first
        :data:`~shared.strict_blur.CONFIRM_MOST` of them, highest scored first; the rest are kept)."""
        tall = CONFIRM_FROM * self.min_face
        unsure = [
            face
            for face in found
            if face.score < CONFIRM_BELOW
            and float(face.box[3] - face.box[1]) >= tall
            and not overlaps(face.box, around)
        ][:CONFIRM_MOST]
        if not unsure:
            return found
        looks = self.look_around(frame, [face.box for face in unsure], threshold)
        dropped = {id(face) for face, kept in zip(unsure, confirmed(unsure, looks), strict=True) if not kept}
        return [face for face in found if id(face) not in dropped]

    @staticmethod
    def _add_new(found: list[Face], more: list[Face], threshold: float) -> None:
        """Append to ``found`` the faces of ``more`` (merged by NMS) that overlap none of its faces by
        :data:`~shared.strict_blur.AROUND_NEW_IOU` or more."""
        taken = np.stack([f.box for f in found]) if found else np.zeros((0, 4), np.float32)
        for face in suppress_faces(more, threshold):
            if not len(taken) or float(box_iou(face.box[None], taken).max()) < AROUND_NEW_IOU:
                found.append(face)

    def _tiled(
        self,
        model: FaceDetector,
        shape: tuple[int, ...],
        picture_at: Callable[[float, tuple[int, int]], Frame],
        scale: float,
        threshold: float,
        due: Iterator[bool],
    ) -> list[Face]:
        """The faces found in tiles of a ``shape`` frame seen at ``scale`` (detector px per source px); none where
        the whole-frame pass sees the frame at that scale or finer already. ``picture_at(s, (w, h))`` makes the frame
        ``s`` times its size, ``w``×``h`` px (only where a tile of it is due): the tiles are cut from it as it is."""
        if not _tiles_needed(model, shape, scale):
            return []
        height, width = shape[:2]
        factor = max(scale, 1.0)
        size = (max(1, round(width * factor)), max(1, round(height * factor)))
        per_pixel = min(scale / factor, 1.0)  # tile pixels per pixel of the enlarged picture
        view = _round32(max(size) * per_pixel)
        tiled = FaceDetector(
            model.engine,
            model.detector,
            size=view,
            score=threshold,
            input_size=model.size,
            at_once=self.period == 1,
        )
        tiles = _take(due, tiled.tile_runs(size[1], size[0]))
        if not any(tiles):
            return []
        shrink, seen = seen_at(size[1], size[0], view)  # the enlarged picture as the tiles see it
        picture = picture_at(factor * shrink, seen)
        # the whole pass ran already, and finds the faces larger than the tiles' overlap: a box that large in a
        # tile is the tiles' false alarm (measured: a 422-px box on a plate at score 0.17)
        largest = TILE_OVERLAP * model.size * shrink / per_pixel  # in pixels of ``picture``
        faces = [
            face
            for face in tiled.detect_frame(picture, threshold, whole_pass=False, tiles=tiles)
            if float(face.box[3] - face.box[1]) <= largest and float(face.box[2] - face.box[0]) <= largest
        ]
        model.count_runs(tiled.runs)  # the model's runs, whichever view ran them
        return _in_frame(faces, factor * shrink)

    def _turned(self, frame: Frame, angle: float, scale: float, threshold: float, due: Iterator[bool]) -> list[Face]:
        """The faces of ``frame`` turned by ``angle`` degrees: the turned frame shrunk whole into the detector's
        input, and in tiles at ``scale``. Each picture is warped at the size it is seen at, in one resampling, and
        only where one of its runs is due."""
        height, width = frame.shape[:2]
        matrix = cv2.getRotationMatrix2D((width / 2, height / 2), angle, 1.0)
        cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
        out_w, out_h = int(height * sin + width * cos), int(height * cos + width * sin)
        matrix[0, 2] += out_w / 2 - width / 2
        matrix[1, 2] += out_h / 2 - height / 2

        def picture_at(times: float, size: tuple[int, int]) -> Frame:
            return np.asarray(cv2.warpAffine(frame, matrix * times, size), np.uint8)

        (whole,) = _take(due, 1)
        found: list[Face] = []
        if whole:
            shrink, seen = seen_at(out_h, out_w, self.detector.view)
            picture = picture_at(shrink, seen)
            found = _in_frame(self.detector.detect_frame(picture, threshold), shrink)
        found += self._tiled(self.detector, (out_h, out_w), picture_at, scale, threshold, due)
        back = cv2.invertAffineTransform(matrix)
        return [mapped(face, back) for face in found]

    def _edges(self, frame: Frame, threshold: float, due: Iterator[bool]) -> list[Face]:
        """The faces cut by the frame's edges, found on its edges mirrored outward (:mod:`workers.faces.edges`), at
        :data:`~shared.strict_blur.EDGE_SCORE` or more; each canvas is one of the extra runs shared out over frames
        (two a frame, the strips whole, where the detector takes a picture of any size)."""
        depth = max(1, round(EDGE_DEPTH * self.min_face))
        zoom, size = EDGE_FACE / self.min_face, self.detector.size
        canvases = edge_canvases(frame, depth, zoom, size, whole=self.detector.takes_any_size)
        floor = max(threshold, EDGE_SCORE)
        found: list[Face] = []
        for canvas, run in zip(canvases, _take(due, len(canvases)), strict=True):
            if run:
                found += edge_faces(self.detector, canvas=canvas, frame_shape=frame.shape, threshold=floor)
        return found

    def look_around(self, frame: Frame, boxes: Sequence[npt.NDArray[np.float32]], threshold: float) -> list[Face]:
        """The faces found close around ``boxes`` (:func:`~workers.faces.close_looks.look_around`), upright and
        turned by this sweep's turns."""
        return look_around(self.detector, self.turns, frame, boxes, threshold)


@dataclass(frozen=True)
class Scan:
    """What :meth:`DetectionSweep.scan` found in a frame: the job's detector's faces, merged, and each other
    detector's."""

    found: list[Face]
    others: list[list[Face]]
    doubts: list[Face]  # the job's detector's faces below the scan's threshold, from DOUBT_FLOOR, merged


def _take(due: Iterator[bool], runs: int) -> list[bool]:
    """Which of the frame's next ``runs`` extra model runs it makes (its schedule, ``due``)."""
    return [next(due) for _ in range(runs)]


def _resized(frame: Frame) -> Callable[[float, tuple[int, int]], Frame]:
    """``frame`` at a size: itself, enlarged (bicubic) or shrunk (bilinear, as the detector shrinks a frame)."""

    def resized(_: float, size: tuple[int, int]) -> Frame:
        if size == (frame.shape[1], frame.shape[0]):
            return frame
        larger = size[0] > frame.shape[1]
        return np.asarray(
            cv2.resize(frame, size, interpolation=cv2.INTER_CUBIC if larger else cv2.INTER_LINEAR), np.uint8
        )

    return resized


def _in_frame(faces: list[Face], times: float) -> list[Face]:
    """``faces`` found in a picture ``times`` the size of the frame, in the frame."""
    if times == 1.0:
        return faces
    return [
        Face(
            box=(face.box / times).astype(np.float32),
            landmarks=(face.landmarks / times).astype(np.float32),
            score=face.score,
        )
        for face in faces
    ]


def _tiles_needed(model: FaceDetector, shape: tuple[int, ...], scale: float) -> bool:
    """Whether a ``shape`` frame must be tiled to be seen at ``scale``: the whole-frame pass sees it coarser."""
    return scale > min(model.view / max(shape[:2]), 1.0) + 1e-6
