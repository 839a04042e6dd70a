"""A chunk's batch through the device path: uploaded once as 4:2:0 planes, converted, processed and converted back
on the device, downloaded once as 4:2:0 planes for the encoder's pipe.

Detection still runs through the detectors' engines on frames handed to them as uint8 BGR (the one download inside
the batch); the pixel stages around it stay on the device, and convert only the faces' regions: the rest of each
frame goes back to the encoder as it came from the decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import torch

from workers.device.blurring import blur_faces_in_planes
from workers.device.colour import yuv420_to_bgr
from workers.faces.detection import Face

__all__ = ["DeviceBlur"]

Planes = npt.NDArray[np.uint8]
Detect = Callable[[npt.NDArray[np.uint8]], Sequence[Sequence[Face]]]


class DeviceBlur:
    """``face_blur`` on ``device`` for batches of 4:2:0 frames (``[N, H*3/2, W]`` uint8, even sizes).

    Args:
        detect: finds the faces of uint8 BGR frames ``[N, H, W, 3]`` (e.g. ``FaceDetector.detect``).
        strength: the blur kernel relative to the face size.
        device: ``cpu``, ``cuda``, ``cuda:1`` …
    """

    def __init__(self, detect: Detect, *, strength: float, device: str = "cpu") -> None:
        self.detect = detect
        self.strength = strength
        self.device = torch.device(device)

    def __call__(self, planes: Planes) -> Planes:
        """The batch with every detected face blurred, as 4:2:0 planes again."""
        raw = torch.from_numpy(np.array(planes)).to(self.device, non_blocking=True)
        host = yuv420_to_bgr(raw).to(torch.uint8).permute(0, 2, 3, 1).contiguous().cpu().numpy()
        faces = self.detect(host)
        return blur_faces_in_planes(raw, faces, self.strength).cpu().numpy()
