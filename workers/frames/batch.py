"""A batch of frames as a back-end holds it: the decoder's 4:2:0 planes, and the BGR view where one exists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["Frames"]

A = TypeVar("A")
"""The back-end's array type: ``numpy.ndarray`` on the host, ``torch.Tensor`` on a torch device."""


@dataclass
class Frames(Generic[A]):
    """One batch of frames in a back-end's arrays.

    At least one of the two is set; where both are, they hold the same frames, and every write of a back-end's
    operation goes into both (the planes in whole 2×2 chroma blocks around what was written).

    Attributes:
        planes: uint8 ``[N, H*3/2, W]``, 4:2:0 (Y, then U, then V), what the encoder's pipe takes; ``None`` where
            the frames came as BGR.
        bgr: uint8 ``[N, H, W, 3]``, BGR, what the models and OpenCV take; ``None`` until a stage needs whole BGR
            frames (:meth:`~workers.frames.backend.FrameBackend.ensure_bgr`).
        height, width: the frames' size (even where ``planes`` is set).
        written: each region an operation rewrote, ``(frame, (x1, y1, x2, y2))``, in order: what a copy of the
            frames elsewhere (the host's, of frames on a GPU) must take over.
    """

    planes: A | None
    bgr: A | None
    height: int
    width: int
    written: list[tuple[int, tuple[int, int, int, int]]] = field(default_factory=list)

    def __len__(self) -> int:
        held = self.planes if self.planes is not None else self.bgr
        return len(held)  # type: ignore[arg-type]
