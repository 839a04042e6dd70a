"""Aligned crops of the faces of a whole batch of frames: their transforms, and the crops gathered (a model then runs
over them in batches, :class:`workers.engines.batching.FittedBatches`, never one face at a time); the processors'
crops are pasted back on their frame back-end (:meth:`workers.frames.backend.FrameBackend.paste`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workers.faces.alignment import estimate_transform, warp_faces
from workers.faces.detection import Face

Frames = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class FaceCrops:
    """The aligned crops of many frames' faces.

    Attributes:
        crops: uint8 [M, S, S, 3] BGR, one per face.
        transforms: float64 [M, 2, 3], each crop's frame → crop transform.
        frame_indices: int64 [M], the frame each crop came from.
    """

    crops: Frames
    transforms: npt.NDArray[np.float64]
    frame_indices: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.crops)


def face_transforms(
    faces_per_frame: Sequence[Sequence[Face]], template: str, size: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """The frame → crop transform aligning every listed face onto ``template`` at ``size`` px, frame by frame, in
    order (``[F, 2, 3]``), and each face's frame (``[F]``): what a frame back-end cuts the crops by."""
    transforms = [estimate_transform(face.landmarks, template, size) for faces in faces_per_frame for face in faces]
    indices = [index for index, faces in enumerate(faces_per_frame) for _ in faces]
    if not transforms:
        return np.zeros((0, 2, 3), np.float64), np.zeros((0,), np.int64)
    return np.stack(transforms), np.asarray(indices, dtype=np.int64)


def gather_crops(
    frames: Frames | Sequence[Frames], faces_per_frame: Sequence[Sequence[Face]], template: str, size: int
) -> FaceCrops:
    """Align every listed face of every frame onto ``template`` at ``size`` px, frame by frame, in order (the
    processors' own crops are cut on their frame back-end: :meth:`workers.frames.backend.FrameBackend.crops`)."""
    if len(frames) != len(faces_per_frame):
        raise ValueError(f"{len(frames)} frames but {len(faces_per_frame)} face lists")
    transforms, indices = face_transforms(faces_per_frame, template, size)
    crops = np.zeros((len(transforms), size, size, 3), np.uint8)
    for face, (transform, index) in enumerate(zip(transforms, indices.tolist(), strict=True)):
        crops[face] = warp_faces(frames[index], [transform], size)[0]
    return FaceCrops(crops, transforms, indices)
