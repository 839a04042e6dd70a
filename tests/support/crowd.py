"""A synthetic clip with exact ground truth for face anonymisers: real faces cut from ``group6.jpg`` moving over a
textured background, growing and shrinking (180 px down to 28 px tall), turning in-plane up to ±40°, with frames of
motion blur, darkness and a face half covered — and a measure of which face-frames came out hidden."""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt

from tests.support.anonymiser_clips import paste_face
from tests.support.faces import detector, image

Frames = npt.NDArray[np.uint8]

WIDTH, HEIGHT, FRAMES, FPS = 480, 270, 50, 25
MOTION_BLUR = range(8, 11)
DARK = range(20, 23)
COVERED = range(28, 32)  # face 0's left half is covered by a patch of background


@dataclass(frozen=True)
class Path2:
    """One face's path: size (face box height, px), centre and in-plane angle, linear/sinusoidal over the clip."""

    face: int  # which of group6's faces
    size: tuple[float, float]
    start: tuple[float, float]
    end: tuple[float, float]
    turn: float  # peak angle, degrees
    phase: float

    def at(self, t: int) -> tuple[float, float, float, float]:
        a = t / (FRAMES - 1)
        size = self.size[0] + (self.size[1] - self.size[0]) * a
        cx = self.start[0] + (self.end[0] - self.start[0]) * a
        cy = self.start[1] + (self.end[1] - self.start[1]) * a
        angle = self.turn * math.sin(2 * math.pi * a * 1.5 + self.phase)
        return size, cx, cy, angle


PATHS = (
    Path2(face=0, size=(180, 28), start=(110, 135), end=(420, 85), turn=40, phase=0.0),
    Path2(face=1, size=(28, 110), start=(445, 215), end=(80, 195), turn=35, phase=1.0),
    Path2(face=3, size=(90, 32), start=(440, 50), end=(280, 30), turn=25, phase=2.0),
)


@dataclass(frozen=True)
class Truth:
    """One face in one frame: its size (box height, px) and the core of its box to judge (x1, y1, x2, y2)."""

    frame: int
    face: int
    size: float
    core: tuple[int, int, int, int]


def _background(rng: np.random.Generator) -> Frames:
    noise = rng.integers(0, 256, (HEIGHT // 4, WIDTH // 4, 3), dtype=np.uint8)
    texture = cv2.resize(noise, (WIDTH, HEIGHT), interpolation=cv2.INTER_CUBIC).astype(np.float32)
    ys, xs = np.mgrid[:HEIGHT, :WIDTH]
    stripes = 40 * np.sin(xs / 9.0 + ys / 23.0)[..., None]
    return np.asarray(np.clip(0.6 * texture + 50 + stripes, 0, 255), np.uint8)


def _patches() -> list[tuple[Frames, float]]:
    """Each face of group6 as a square patch 1.6 face-heights wide, with its face height in the patch."""
    picture = image("group6.jpg")
    faces = sorted(detector("yunet").detect_frame(picture), key=lambda f: float(f.box[0]))
    patches = []
    for face in faces:
        x1, y1, x2, y2 = (float(v) for v in face.box)
        height = y2 - y1
        side = int(1.6 * height)
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        padded = cv2.copyMakeBorder(picture, side, side, side, side, cv2.BORDER_REFLECT)
        left, top = int(cx - side / 2) + side, int(cy - side / 2) + side
        patches.append((padded[top : top + side, left : left + side].copy(), height))
    return patches


def build(path: Path) -> list[Truth]:
    """Write the clip (H.264, near-lossless) to ``path``; the ground truth of every face-frame."""
    rng = np.random.default_rng(17)
    background = _background(rng)
    patches = _patches()
    truths: list[Truth] = []
    frames = np.empty((FRAMES, HEIGHT, WIDTH, 3), np.uint8)
    for t in range(FRAMES):
        frame = np.roll(background, 2 * t, axis=1).copy()  # the background moves too
        for number, route in enumerate(PATHS):
            size, cx, cy, angle = route.at(t)
            patch, face_height = patches[route.face]
            if not paste_face(frame, patch, face_height, size, cx, cy, angle):
                continue
            half = size * 0.25
            core = (
                max(int(cx - half), 0),
                max(int(cy - half), 0),
                min(int(cx + half), WIDTH),
                min(int(cy + half), HEIGHT),
            )
            if number == 0 and t in COVERED:  # the left half of the face covered by background
                cover_x2 = int(cx)
                frame[int(cy - size) : int(cy + size), max(int(cx - size), 0) : cover_x2] = background[
                    int(cy - size) : int(cy + size), max(int(cx - size), 0) : cover_x2
                ]
                core = (cover_x2, core[1], core[2], core[3])
            if core[2] - core[0] >= 4 and core[3] - core[1] >= 4:
                truths.append(Truth(t, number, size, core))
        if t in MOTION_BLUR:
            kernel = np.zeros((1, 15), np.float32)
            kernel[0, :] = 1 / 15
            frame = np.asarray(cv2.filter2D(frame, -1, kernel), np.uint8)
        if t in DARK:
            frame = np.asarray(frame.astype(np.float32) * 0.25, np.uint8)
        frames[t] = frame
    _encode(frames, path)
    return truths


def _encode(frames: Frames, path: Path) -> None:
    args = [
        "ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", f"{WIDTH}x{HEIGHT}",
        "-r", str(FPS), "-i", "-", "-c:v", "libx264", "-preset", "veryfast", "-crf", "8", "-pix_fmt", "yuv420p",
        "-g", "25", str(path),
    ]  # fmt: skip
    subprocess.run(args, input=frames.tobytes(), check=True)


def detail(region: Frames) -> float:
    """Mean absolute Laplacian of a region: how much fine detail (a face's features) it shows."""
    grey = cv2.cvtColor(np.ascontiguousarray(region), cv2.COLOR_RGB2GRAY).astype(np.float32)
    return float(np.abs(cv2.Laplacian(grey, cv2.CV_32F)).mean())


def hidden(before: Frames, after: Frames, truths: list[Truth]) -> dict[tuple[int, int], bool]:
    """Per (frame, face): whether the output hides the face (its core lost at least half its detail)."""
    result = {}
    for truth in truths:
        x1, y1, x2, y2 = truth.core
        was, now = detail(before[truth.frame, y1:y2, x1:x2]), detail(after[truth.frame, y1:y2, x1:x2])
        result[(truth.frame, truth.face)] = now < 0.5 * was
    return result


def longest_run_shown(hid: dict[tuple[int, int], bool], truths: list[Truth], min_size: float) -> int:
    """The most consecutive frames any face of at least ``min_size`` px was left shown."""
    longest = 0
    for face in {t.face for t in truths}:
        run = 0
        for truth in sorted((t for t in truths if t.face == face), key=lambda t: t.frame):
            run = run + 1 if truth.size >= min_size and not hid[(truth.frame, face)] else 0
            longest = max(longest, run)
    return longest


def background_changed(before: Frames, after: Frames) -> float:
    """The share of pixels changed away from every face (beyond a face-height of each face's centre): what an
    anonymiser hid that it need not have."""
    changed = np.abs(after.astype(np.int16) - before.astype(np.int16)).max(axis=-1) > 2
    near = np.zeros(changed.shape, bool)
    for t in range(len(before)):
        for route in PATHS:
            size, cx, cy, _ = route.at(t)
            near[t, max(int(cy - size), 0) : int(cy + size), max(int(cx - size), 0) : int(cx + size)] = True
    return float(changed[~near].mean())
