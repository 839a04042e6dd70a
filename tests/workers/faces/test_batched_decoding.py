"""The torch detectors' batched suppression (:mod:`workers.faces.batched_decoding`) gives OpenCV's answers on the
host, for whole batches. (The crops' transforms are the host's own on both frame back-ends:
:func:`workers.faces.cropping.face_transforms`.)"""

from __future__ import annotations

import cv2
import numpy as np
import torch

from workers.faces.batched_decoding import suppress


def test_suppression_keeps_what_opencv_keeps_frame_by_frame() -> None:
    rng = np.random.default_rng(1)
    frames, candidates = 6, 40
    centres = rng.uniform(0, 400, (frames, 5, 2))  # a few faces per frame, many boxes around each
    pick = rng.integers(0, 5, (frames, candidates))
    centre = np.take_along_axis(centres, pick[..., None], axis=1) + rng.normal(0, 6, (frames, candidates, 2))
    half = rng.uniform(20, 40, (frames, candidates, 1))
    boxes = np.concatenate([centre - half, centre + half], axis=2).astype(np.float32)
    scores = rng.uniform(0, 1, (frames, candidates)).astype(np.float32)
    keep = suppress(torch.from_numpy(boxes), torch.from_numpy(scores), 0.5, 0.3).numpy()
    for frame in range(frames):
        xywh = np.concatenate([boxes[frame, :, :2], boxes[frame, :, 2:] - boxes[frame, :, :2]], axis=1)
        kept = np.asarray(cv2.dnn.NMSBoxes(xywh.tolist(), scores[frame].tolist(), 0.5, 0.3)).reshape(-1)
        assert sorted(np.flatnonzero(keep[frame]).tolist()) == sorted(kept.tolist()), frame
        assert 0 < len(kept) < (scores[frame] >= 0.5).sum()
