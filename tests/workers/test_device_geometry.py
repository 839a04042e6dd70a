"""The device's alignment and suppression give the host path's answers (numpy/OpenCV), for whole batches."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from workers.device.geometry import similarity_transforms
from workers.device.suppression import suppress
from workers.faces.alignment import similarity_transform, template_points


def test_similarity_transforms_of_a_batch_equal_the_host_estimator() -> None:
    rng = np.random.default_rng(0)
    template = template_points("arcface_128", 128)
    angles, scales = rng.uniform(-np.pi, np.pi, 32), rng.uniform(0.2, 5, 32)
    faces = []
    for angle, scale in zip(angles, scales, strict=True):
        rotation = scale * np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
        faces.append(template @ rotation.T + rng.uniform(-500, 500, 2) + rng.normal(0, 2, (5, 2)))
    faces.append(template * np.array([-1.0, 1.0]))  # mirrored: the reflection case of Umeyama's estimator
    landmarks = np.stack(faces)
    ours = similarity_transforms(torch.from_numpy(landmarks), torch.from_numpy(template)).numpy()
    for index, points in enumerate(landmarks):
        assert np.allclose(ours[index], similarity_transform(points, template), atol=1e-9), index


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
