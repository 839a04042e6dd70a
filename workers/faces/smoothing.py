"""Landmark smoothing along a face track, and how many frames each side a track's decisions read — pure numpy; used
by :mod:`workers.faces.tracking`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from workers.faces.detection import Face

__all__ = ["MAX_SMOOTHING_RADIUS", "context_frames", "smoothed", "smoothing_radius"]

MAX_SMOOTHING_RADIUS = 3
"""Frames each side of the landmark smoothing window at strength 1."""


def smoothing_radius(smoothing: float) -> int:
    """The frames each side of the landmark smoothing window at ``smoothing`` (0…1)."""
    return round(smoothing * MAX_SMOOTHING_RADIUS)


def context_frames(max_gap: int, smoothing: float = 1.0) -> int:
    """The frames each side that a decision about one frame reads: a gap, its two ends and a smoothing window
    (none without smoothing: a job that reads only boxes, like ``face_blur``, reads 3 frames fewer each side)."""
    return max_gap + 1 + smoothing_radius(smoothing)


def smoothed(face: Face, index: int, radius: int, at: Callable[[int], Face | None]) -> Face:
    """``face`` (its track's at frame ``index``) with its landmarks averaged over ``radius`` frames each side with
    a symmetric Gaussian window (steady motion is not delayed); ``at`` gives the track's face at another frame."""
    if radius == 0:
        return face
    sigma = radius / 2.0
    total = np.zeros((5, 2), np.float64)
    weights = 0.0
    for offset in range(-radius, radius + 1):
        other = face if offset == 0 else at(index + offset)
        if other is None:
            continue
        weight = float(np.exp(-(offset**2) / (2 * sigma**2)))
        total += weight * other.landmarks
        weights += weight
    return replace(face, landmarks=np.asarray(total / weights, np.float32))
