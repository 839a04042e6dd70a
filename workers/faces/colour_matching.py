"""Matching a generated face's colours to the crop it replaces: FaceFusion's ``match_frame_color`` and
``conditional_match_frame_color`` (docs/MODELS.md 10.0), pure numpy and OpenCV on one uint8 BGR crop at a time.

:func:`match_colour` gives the generated crop the reference's low frequencies: three passes, at sides from 16 px up
to the crop's (``linspace(16, side, 3)`` without the end, rounded to even numbers), each moving the reference by the
difference of the two crops area-averaged to that side, then one at full size — about a 16 px colour transfer that
keeps the generated crop's detail. :func:`match_colour_conditionally` blends that result over the generated crop by
how alike their hue-saturation histograms are (50 × 60 bins, correlation mapped from [-1, 1] to [0, 1]).
"""

from __future__ import annotations

import cv2
import numpy as np
import numpy.typing as npt

__all__ = ["histogram_likeness", "match_colour", "match_colour_conditionally"]

Crop = npt.NDArray[np.uint8]

_PASSES = 3
_SMALLEST = 16
_HUE_SATURATION_BINS = [50, 60]
_HUE_SATURATION_RANGES = [0, 180, 0, 256]


def _even(value: float) -> int:
    return max(2, round(value / 2) * 2)


def _equalised(reference: Crop, image: Crop, side: tuple[int, int]) -> Crop:
    """``image`` moved by the difference of ``reference`` and ``image``, both area-averaged to ``side``."""
    small_reference = cv2.resize(reference, side, interpolation=cv2.INTER_AREA).astype(np.float32)
    small_image = cv2.resize(image, side, interpolation=cv2.INTER_AREA).astype(np.float32)
    difference = cv2.resize(small_reference - small_image, image.shape[1::-1], interpolation=cv2.INTER_CUBIC)
    moved: Crop = np.clip(image.astype(np.float32) + difference, 0, 255).astype(np.uint8)
    return moved


def match_colour(reference: Crop, image: Crop) -> Crop:
    """``image`` with ``reference``'s colour (its low frequencies); both uint8 ``[H, W, 3]``, of any two sizes."""
    for side in np.linspace(_SMALLEST, image.shape[0], _PASSES, endpoint=False):
        reference = _equalised(reference, image, (_even(side), _even(side)))
    return _equalised(reference, image, (image.shape[1], image.shape[0]))


def histogram_likeness(one: Crop, other: Crop) -> float:
    """How alike two crops' hue-saturation histograms are: their correlation mapped to [0, 1]."""
    histograms = [
        cv2.calcHist(
            [cv2.cvtColor(crop, cv2.COLOR_BGR2HSV)], [0, 1], None, _HUE_SATURATION_BINS, _HUE_SATURATION_RANGES
        )
        for crop in (one, other)
    ]
    correlation = cv2.compareHist(histograms[0], histograms[1], cv2.HISTCMP_CORREL)
    return float(np.interp(correlation, [-1.0, 1.0], [0.0, 1.0]))


def match_colour_conditionally(reference: Crop, image: Crop) -> Crop:
    """:func:`match_colour`'s result blended over ``image`` by :func:`histogram_likeness` (the more alike the two
    crops' colours already are, the more of the match)."""
    weight = histogram_likeness(reference, image)
    matched = match_colour(reference, image)
    return np.asarray(cv2.addWeighted(image, 1.0 - weight, matched, weight, 0.0), np.uint8)
