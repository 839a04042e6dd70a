"""face_blur's ways of hiding a face (workers/processors/face_blur.py): blur, pixelate and fill, each inside the
box entirely, with a soft edge that fades out within the margin, and nothing changed beyond it."""

from __future__ import annotations

import numpy as np
import pytest

from shared.options import BlurStyle
from workers.faces.detection import Face
from workers.processors.face_blur import blur_faces


def _frame() -> np.ndarray:
    rng = np.random.default_rng(3)
    return rng.integers(0, 256, (120, 160, 3), dtype=np.uint8)


def _detail(image: np.ndarray) -> float:
    return float(np.abs(np.diff(image.astype(np.float32), axis=1)).mean())


FACE = Face(box=np.asarray([50, 30, 90, 80], np.float32), landmarks=np.zeros((5, 2), np.float32), score=0.9)


@pytest.mark.parametrize("style", ["blur", "pixelate", "fill"])
def test_each_style_hides_the_box_fades_in_the_margin_and_leaves_the_rest(style: BlurStyle) -> None:
    frame = _frame()
    out = blur_faces(frame, [FACE], 0.5, style=style, margin=0.25)
    inside = (slice(30, 80), slice(50, 90))
    assert _detail(out[inside]) < 0.4 * _detail(frame[inside])
    changed = np.any(out != frame, axis=-1)
    grown = np.zeros_like(changed)
    grown[17:93, 40:100] = True  # the box grown by a quarter of its size each side
    assert not changed[~grown].any()  # nothing beyond the margin
    # the soft edge: within the margin the change fades towards the outside
    edge = np.abs(out[20:100, 40:50].astype(int) - frame[20:100, 40:50]).mean(axis=(0, 2))
    assert edge[-1] > edge[0]


def test_fill_is_one_colour_inside_the_box() -> None:
    out = blur_faces(_frame(), [FACE], 0.5, style="fill")
    region = out[30:80, 50:90].reshape(-1, 3)
    assert (region == region[0]).all()
