"""Aligned crops of the faces of a whole batch of frames: gather them (a model then runs over them in batches,
:class:`workers.engines.batching.FittedBatches`, never one face at a time), and paste the results back into
their frames.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from workers.faces.alignment import estimate_transform, paste_back, warp_faces
from workers.faces.detection import Face

FloatArray = npt.NDArray[np.float32]
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


def gather_crops(
    frames: Frames | Sequence[Frames], faces_per_frame: Sequence[Sequence[Face]], template: str, size: int
) -> FaceCrops:
    """Align every listed face of every frame onto ``template`` at ``size`` px, frame by frame, in order."""
    if len(frames) != len(faces_per_frame):
        raise ValueError(f"{len(frames)} frames but {len(faces_per_frame)} face lists")
    crops, transforms, indices = [], [], []
    for index, (frame, faces) in enumerate(zip(frames, faces_per_frame, strict=True)):
        if not faces:
            continue
        matrices = [estimate_transform(face.landmarks, template, size) for face in faces]
        crops.append(warp_faces(frame, matrices, size))
        transforms.extend(matrices)
        indices.extend([index] * len(faces))
    if not crops:
        return FaceCrops(
            np.zeros((0, size, size, 3), np.uint8), np.zeros((0, 2, 3), np.float64), np.zeros((0,), np.int64)
        )
    return FaceCrops(np.concatenate(crops), np.stack(transforms), np.asarray(indices, dtype=np.int64))


def paste_crops(frames: Frames, faces: FaceCrops, crops: Frames, mask: FloatArray) -> Frames:
    """A copy of ``frames`` with each of ``crops`` (processed versions of ``faces.crops``) blended back.

    Args:
        frames: uint8 [N, H, W, 3], the frames the crops were gathered from.
        faces: where each crop belongs.
        crops: uint8 [M, S', S', 3]; may be larger than the gathered crops (an enhancer's output size), in
            which case the transforms are scaled to match.
        mask: float32 [S', S'] blend weights, e.g. :func:`workers.faces.alignment.box_mask`, or [M, S', S']:
            one mask per crop (:class:`workers.faces.masking.FaceMasker`).
    """
    output = frames.copy()
    if len(crops) != len(faces):
        raise ValueError(f"{len(crops)} crops for {len(faces)} faces")
    if len(crops) == 0:
        return output
    scale = crops.shape[1] / faces.crops.shape[1]
    masks = mask if mask.ndim == 3 else np.broadcast_to(mask, (len(crops), *mask.shape))
    for crop, transform, index, face_mask in zip(crops, faces.transforms, faces.frame_indices, masks, strict=True):
        frame = output[index]
        paste_back(frame, crop, transform * scale, face_mask, out=frame)
    return output
