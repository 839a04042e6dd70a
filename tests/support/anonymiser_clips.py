"""Seeded HD clips with exact ground truth for the anonymiser: real faces on moving paths, and how much of them an
output still shows.

Each clip is built from the reference data's real faces (the six of ``group6.jpg`` and the one of ``s0.jpg``)
pasted, with a soft elliptical edge, over a background: a textured pattern (``texture``, testsrc-like noise and
stripes) or a real plate (``plate``: the top of ``crowd_1080p.mp4``'s first frame — arcade, lettering, no people —
scaled to the frame). Every scene (a scene cut every ``cut_every`` frames changes the background and every face's
place, size and path) gives each face:

* a size drawn log-uniformly within ``min_size``–``max_size`` px (face box height) at the scene's start and end,
  linear in between (faces shrink and grow);
* an in-plane turn of up to ±``max_turn`` degrees, sinusoidal;
* a straight path, some fast enough to leave one edge of the frame and come back at the other (edge wrap), and now
  and then a jump to another place mid-scene;

and every frame may be motion-blurred, darkened, or have one face half covered by the background. The same spec
and seed always give the same frames and truths. ``faces=0`` builds a face-free clip (what an anonymiser changes
there is over-blurring alone).

Which face-frames an output hides is judged as :mod:`tests.support.crowd` does: a face is hidden when the core of
its box (the middle half) lost at least half its fine detail.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Literal

import cv2
import numpy as np
import numpy.typing as npt

from shared.options import FaceOptions
from tests.support.faces import MEDIA, detector, image
from workers.faces.track_feed import TrackFeed
from workers.processors.face_blur import FaceBlurProcessor

Frame = npt.NDArray[np.uint8]
Background = Literal["texture", "plate", "mixed"]

SIZE_BUCKETS = ((0.0, 24.0), (24.0, 32.0), (32.0, 64.0), (64.0, 120.0), (120.0, 1e9))
"""Face sizes (box height, px) the figures are split by; faces under 24 px are shown apart (no promise covers them)."""


@dataclass(frozen=True)
class ClipSpec:
    """What to generate. ``faces=0``: a face-free clip."""

    width: int = 1280
    height: int = 720
    frames: int = 60
    seed: int = 0
    faces: int = 6
    cut_every: int = 30
    min_size: float = 20.0
    max_size: float = 200.0
    max_turn: float = 40.0
    background: Background = "mixed"
    effects: bool = True  # motion blur, darkness, occlusion


@dataclass(frozen=True)
class Truth:
    """One face in one frame: its size (box height, px), its upright box and the core to judge (x1, y1, x2, y2)."""

    frame: int
    face: int
    size: float
    box: tuple[float, float, float, float]
    core: tuple[int, int, int, int]
    angle: float = 0.0
    notes: tuple[str, ...] = ()  # "covered", "edge" (cut by the frame's edge), "blur", "dark", "cut" (a scene's first)


@dataclass
class _Route:
    patch: int
    size: tuple[float, float]
    start: tuple[float, float]
    velocity: tuple[float, float]
    turn: float
    phase: float
    jump_at: int | None
    jump_to: tuple[float, float]

    def at(self, t: int, length: int, width: int, height: int) -> tuple[float, float, float, float]:
        a = t / max(length - 1, 1)
        size = math.exp(math.log(self.size[0]) + (math.log(self.size[1]) - math.log(self.size[0])) * a)
        start, since = self.start, t
        if self.jump_at is not None and t >= self.jump_at:
            start, since = self.jump_to, t - self.jump_at
        # positions wrap around the frame with a face-sized margin, so a face leaves one edge and enters the other
        span_x, span_y = width + 2 * size, height + 2 * size
        cx = (start[0] + self.velocity[0] * since + size) % span_x - size
        cy = (start[1] + self.velocity[1] * since + size) % span_y - size
        angle = self.turn * math.sin(2 * math.pi * a * 1.5 + self.phase)
        return size, cx, cy, angle


@dataclass
class _Scene:
    start: int
    length: int
    background: Frame
    routes: list[_Route] = field(default_factory=list)


@cache
def patches() -> tuple[tuple[Frame, float], ...]:
    """Each reference face as a square patch 1.6 face-heights wide, with its face height in the patch."""
    found = []
    for name in ("group6.jpg", "s0.jpg"):
        picture = image(name)
        faces = sorted(detector("yunet").detect_frame(picture), key=lambda f: float(f.box[0]))
        for face in faces:
            x1, y1, x2, y2 = (float(v) for v in face.box)
            height = y2 - y1
            side = int(1.6 * height)
            cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
            padded = cv2.copyMakeBorder(picture, side, side, side, side, cv2.BORDER_REFLECT)
            left, top = int(cx - side / 2) + side, int(cy - side / 2) + side
            found.append((padded[top : top + side, left : left + side].copy(), height))
    return tuple(found)


@cache
def _plate_source() -> Frame:
    capture = cv2.VideoCapture(str(MEDIA / "crowd_1080p.mp4"))
    try:
        ok, frame = capture.read()
    finally:
        capture.release()
    if not ok:
        raise FileNotFoundError(MEDIA / "crowd_1080p.mp4")
    return np.asarray(frame[:440], np.uint8)  # the arcade above everyone's head


def _texture(rng: np.random.Generator, width: int, height: int) -> Frame:
    noise = rng.integers(0, 256, (max(height // 8, 2), max(width // 8, 2), 3), dtype=np.uint8)
    texture = cv2.resize(noise, (width, height), interpolation=cv2.INTER_CUBIC).astype(np.float32)
    ys, xs = np.mgrid[:height, :width]
    period = rng.uniform(6.0, 14.0)
    stripes = 40 * np.sin(xs / period + ys / (2.5 * period))[..., None]
    bars = np.zeros((height, width, 3), np.float32)  # testsrc-like colour bars over a third of the frame
    colours = rng.integers(0, 256, (7, 3))
    bar_w = width // 7
    top = int(rng.uniform(0, height * 2 / 3))
    for i, colour in enumerate(colours):
        bars[top : top + height // 3, i * bar_w : (i + 1) * bar_w] = colour
    base = 0.6 * texture + 50 + stripes
    mask = bars.any(axis=-1, keepdims=True)
    return np.asarray(np.clip(np.where(mask, 0.5 * base + 0.5 * bars, base), 0, 255), np.uint8)


def _plate(rng: np.random.Generator, width: int, height: int) -> Frame:
    source = _plate_source()
    if rng.random() < 0.5:
        source = source[:, ::-1]
    return np.asarray(cv2.resize(np.ascontiguousarray(source), (width, height), interpolation=cv2.INTER_AREA))


def _scenes(spec: ClipSpec, rng: np.random.Generator) -> list[_Scene]:
    scenes = []
    count = len(patches())
    for start in range(0, spec.frames, max(spec.cut_every, 1)):
        length = min(spec.cut_every, spec.frames - start)
        kind = spec.background
        if kind == "mixed":
            kind = "plate" if len(scenes) % 2 else "texture"
        background = (
            _texture(rng, spec.width, spec.height) if kind == "texture" else _plate(rng, spec.width, spec.height)
        )
        scene = _Scene(start, length, background)
        for number in range(spec.faces):
            lo, hi = math.log(spec.min_size), math.log(spec.max_size)
            size = (math.exp(rng.uniform(lo, hi)), math.exp(rng.uniform(lo, hi)))
            fast = rng.random() < 0.3  # fast enough to wrap round an edge within the scene
            speed = rng.uniform(0.6, 1.2) * spec.width / max(length, 1) if fast else rng.uniform(0.0, 6.0)
            heading = rng.uniform(0, 2 * math.pi)
            velocity = (speed * math.cos(heading), speed * math.sin(heading) * (0.3 if fast else 1.0))
            jump_at = (
                int(rng.integers(length // 4, max(length * 3 // 4, length // 4 + 1))) if rng.random() < 0.3 else None
            )
            scene.routes.append(
                _Route(
                    patch=(number + int(rng.integers(0, count))) % count,
                    size=size,
                    start=(rng.uniform(0, spec.width), rng.uniform(0, spec.height)),
                    velocity=velocity,
                    turn=rng.uniform(0.0, spec.max_turn) * (1 if rng.random() < 0.5 else -1),
                    phase=rng.uniform(0, 2 * math.pi),
                    jump_at=jump_at,
                    jump_to=(rng.uniform(0, spec.width), rng.uniform(0, spec.height)),
                )
            )
        scenes.append(scene)
    return scenes


def paste_face(frame: Frame, patch: Frame, face_height: float, size: float, cx: float, cy: float, angle: float) -> bool:
    """Paste the face ``patch`` (its face ``face_height`` px tall) into ``frame`` at ``size`` px, centred on ``cx``,
    ``cy`` and turned by ``angle`` degrees, through a soft elliptic mask; False where it falls outside the frame."""
    height, width = frame.shape[:2]
    scale = size / face_height
    side = patch.shape[0]
    out_side = int(math.ceil(side * scale * 1.5)) | 1
    matrix = cv2.getRotationMatrix2D((side / 2, side / 2), angle, scale)
    matrix[:, 2] += out_side / 2 - side / 2
    warped = cv2.warpAffine(patch, matrix, (out_side, out_side), flags=cv2.INTER_AREA)
    mask = np.zeros((side, side), np.float32)
    cv2.ellipse(mask, (side // 2, side // 2), (int(side * 0.42), int(side * 0.48)), 0, 0, 360, 1.0, -1)
    mask = cv2.GaussianBlur(mask, (0, 0), side * 0.03)
    alpha = cv2.warpAffine(mask, matrix, (out_side, out_side))[..., None]
    x0, y0 = int(round(cx - out_side / 2)), int(round(cy - out_side / 2))
    fx1, fy1 = max(x0, 0), max(y0, 0)
    fx2, fy2 = min(x0 + out_side, width), min(y0 + out_side, height)
    if fx2 <= fx1 or fy2 <= fy1:
        return False
    region = frame[fy1:fy2, fx1:fx2].astype(np.float32)
    src = warped[fy1 - y0 : fy2 - y0, fx1 - x0 : fx2 - x0].astype(np.float32)
    a = alpha[fy1 - y0 : fy2 - y0, fx1 - x0 : fx2 - x0]
    frame[fy1:fy2, fx1:fx2] = np.clip(src * a + region * (1 - a), 0, 255).astype(np.uint8)
    return True


def generate(spec: ClipSpec) -> Iterator[tuple[Frame, list[Truth]]]:
    """The clip's frames (uint8 [H, W, 3] BGR), one at a time, each with the truths of its faces."""
    rng = np.random.default_rng(spec.seed)
    faces = patches()
    scenes = _scenes(spec, rng)
    for scene in scenes:
        drift = rng.integers(-3, 4)
        for local in range(scene.length):
            t = scene.start + local
            frame = np.roll(scene.background, int(drift) * local, axis=1).copy()  # the background moves too
            plain = frame.copy()
            truths: list[Truth] = []
            for number, route in enumerate(scene.routes):
                size, cx, cy, angle = route.at(local, scene.length, spec.width, spec.height)
                patch, face_height = faces[route.patch]
                paste_face(frame, patch, face_height, size, cx, cy, angle)
                half = size * 0.25
                core = (
                    max(int(cx - half), 0),
                    max(int(cy - half), 0),
                    min(int(cx + half), spec.width),
                    min(int(cy + half), spec.height),
                )
                notes: list[str] = ["cut"] if local == 0 and scene.start > 0 else []
                if spec.effects and rng.random() < 0.04:  # the left half covered by the background
                    top, bottom = max(int(cy - size), 0), max(int(cy + size), 0)
                    left, right = max(int(cx - size), 0), max(int(cx), 0)
                    frame[top:bottom, left:right] = plain[top:bottom, left:right]
                    core = (max(right, core[0]), core[1], core[2], core[3])
                    notes.append("covered")
                if min(cx - size / 2, cy - size / 2) < 0 or cx + size / 2 > spec.width or cy + size / 2 > spec.height:
                    notes.append("edge")
                if core[2] - core[0] >= 4 and core[3] - core[1] >= 4:
                    box = (cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2)
                    face = number + 100 * (scene.start // max(spec.cut_every, 1))
                    truths.append(Truth(t, face, size, box, core, angle, tuple(notes)))
            if spec.effects and rng.random() < 0.06:
                length = int(rng.integers(9, 17))
                kernel = np.zeros((length, length), np.float32)
                kernel[length // 2, :] = 1 / length
                turn = cv2.getRotationMatrix2D((length / 2 - 0.5, length / 2 - 0.5), float(rng.uniform(0, 180)), 1)
                kernel = cv2.warpAffine(kernel, turn, (length, length))
                kernel /= max(float(kernel.sum()), 1e-6)
                frame = np.asarray(cv2.filter2D(frame, -1, kernel), np.uint8)
                truths = [replace(truth, notes=(*truth.notes, "blur")) for truth in truths]
            if spec.effects and rng.random() < 0.06:
                frame = np.asarray(frame.astype(np.float32) * rng.uniform(0.25, 0.4), np.uint8)
                truths = [replace(truth, notes=(*truth.notes, "dark")) for truth in truths]
            yield frame, truths


def detail(region: Frame) -> float:
    """Mean absolute Laplacian of a region: how much fine detail (a face's features) it shows."""
    grey = cv2.cvtColor(np.ascontiguousarray(region), cv2.COLOR_BGR2GRAY).astype(np.float32)
    return float(np.abs(cv2.Laplacian(grey, cv2.CV_32F)).mean())


def is_hidden(before: Frame, after: Frame, truth: Truth) -> bool:
    """Whether the output hides the face: its core lost at least half the fine detail a blur can take from it.

    What a blur leaves is not nothing: the level steps of 8-bit pixels (most of what is left in a dark frame) and the
    slow shading of the face. So the detail is counted above a floor, the core's detail under a Gaussian of a sixth of
    its height: in a dark, motion-blurred frame a face that showed 1.3–2.9 (47 in a clear one) and was blurred to
    0.8–1.6 has lost most of what can be lost, not less than half of it."""
    x1, y1, x2, y2 = truth.core
    core = np.ascontiguousarray(before[y1:y2, x1:x2])
    was, now = detail(core), detail(after[y1:y2, x1:x2])
    floor = detail(cv2.GaussianBlur(core, (0, 0), max((y2 - y1) / 6, 1.0))) if core.size else 0.0
    return was <= floor or now - floor < 0.5 * (was - floor)


def background_mask(shape: tuple[int, ...], truths: list[Truth]) -> npt.NDArray[np.bool_]:
    """The pixels farther than a face-height from every face's centre: what need not change."""
    far = np.ones(shape[:2], bool)
    for truth in truths:
        x1, y1, x2, y2 = truth.box
        cx, cy, size = (x1 + x2) / 2, (y1 + y2) / 2, truth.size
        far[max(int(cy - size), 0) : max(int(cy + size), 0), max(int(cx - size), 0) : max(int(cx + size), 0)] = False
    return far


def changed(before: Frame, after: Frame) -> npt.NDArray[np.bool_]:
    """The pixels an output changed (by more than 2 in any channel)."""
    return np.asarray(np.abs(after.astype(np.int16) - before.astype(np.int16)).max(axis=-1) > 2)


@dataclass
class Score:
    """What an output of a clip hid and changed."""

    shown: dict[tuple[int, int], bool] = field(default_factory=dict)  # (frame, face) -> left visible
    sizes: dict[tuple[int, int], float] = field(default_factory=dict)
    background_changed: int = 0
    background_pixels: int = 0

    def add(self, before: Frame, after: Frame, truths: list[Truth]) -> None:
        """Judge one frame of the output against its input and truths."""
        for truth in truths:
            key = (truth.frame, truth.face)
            self.shown[key] = not is_hidden(before, after, truth)
            self.sizes[key] = truth.size
        far = background_mask(before.shape, truths)
        self.background_changed += int((changed(before, after) & far).sum())
        self.background_pixels += int(far.sum())

    def recall(self, lo: float, hi: float = 1e9) -> tuple[int, int]:
        """Face-frames hidden, and face-frames in all, of faces ``lo`` ≤ size < ``hi``."""
        keys = [k for k, size in self.sizes.items() if lo <= size < hi]
        return sum(not self.shown[k] for k in keys), len(keys)

    def longest_shown(self, min_size: float = 24.0) -> int:
        """The most consecutive frames any face of at least ``min_size`` px was left visible."""
        longest = 0
        for face in {f for _, f in self.shown}:
            run, last = 0, -2
            for frame in sorted(t for t, f in self.shown if f == face):
                visible = self.shown[(frame, face)] and self.sizes[(frame, face)] >= min_size
                run = run + 1 if visible and frame == last + 1 else (1 if visible else 0)
                last = frame
                longest = max(longest, run)
        return longest

    @property
    def background_share(self) -> float:
        """The share of the background's pixels the output changed."""
        return self.background_changed / max(self.background_pixels, 1)


@dataclass
class Outcome:
    """What ``face_blur`` did to a clip: the score, its time (detection, tracking and blurring; not the judging), and
    the detector's model runs."""

    score: Score
    seconds: float
    frames: int
    calls: int


def blur_clip(frames: list[Frame], truths: list[list[Truth]], face: dict[str, object]) -> Outcome:
    """``face_blur`` with the face options ``face`` over ``frames`` as one chunk with no look-behind, as a job's
    chunk runs it (:class:`~workers.faces.track_feed.TrackFeed` then the processor's stage), judged against ``truths``.

    The detectors are the reference models (``tests.support.faces.detector``)."""
    options = FaceOptions.model_validate(face)
    strict = options.blur_strict
    primary = detector(options.detector)
    other = options.strict_second_detector if strict else None
    second = detector(other) if other is not None and other != options.detector else None
    processor = FaceBlurProcessor(
        primary,
        strength=options.blur_strength,
        style=options.blur_style,
        margin=options.blur_margin if strict else 0.0,
        uncertain=options.blur_uncertain if strict else "faces",
    )
    feed = TrackFeed(primary, None, options, strict=strict, landmarks=False, second=second)
    score = Score()
    batches = [np.stack(frames[i : i + 8]) for i in range(0, len(frames), 8)]
    started = time.perf_counter()
    judging = 0.0  # the time spent keeping and judging the frames, left out of the job's
    index = 0
    for work in feed.work([], batches, len(frames)):
        mark = time.perf_counter()
        originals = work.frames.copy()
        judging += time.perf_counter() - mark
        out = processor.stages()[0](work)
        mark = time.perf_counter()
        for before, after in zip(originals, out.frames, strict=True):
            score.add(before, after, truths[index])
            index += 1
        judging += time.perf_counter() - mark
    seconds = time.perf_counter() - started - judging
    calls = processor.tally().calls + (second.runs if second is not None else 0)
    return Outcome(score, seconds, len(frames), calls)
