"""The frame back-ends: one interface for the pixel work of every processor, two implementations.

A processor's pixel work — colour conversion of whole frames or of regions, aligned crops gathered by affine
matrices, crops pasted back through masks, regions blurred, pixelated or filled, regions drawn on — is written
once, against :class:`~workers.frames.backend.FrameBackend`, on a :class:`~workers.frames.batch.Frames` batch
(4:2:0 planes as the decoder gives them, the BGR view where one exists). Two back-ends implement it:

- :class:`~workers.frames.host.HostBackend`: numpy and OpenCV on the host (the CPU's back-end);
- :class:`~workers.frames.torch.TorchBackend`: torch tensors on a torch device (CUDA, ROCm, or the CPU in tests),
  pinned copies on CUDA.

Which one a worker's frames take, and whether they travel as the decoder's 4:2:0 planes, is decided by
:mod:`workers.frames.choice`, in one place; :class:`~workers.frames.feed.FrameFeed` carries a chunk's planes to the
back-end and its BGR to the host stages. A processor's stage reaches the batch through
:meth:`workers.processors.base.Work.on_backend`.
"""

from workers.frames.backend import Box, FrameBackend
from workers.frames.batch import Frames
from workers.frames.choice import BackendChoice, backend_for, frame_backend, frame_path_device, make_backend
from workers.frames.feed import FrameFeed

__all__ = [
    "BackendChoice",
    "Box",
    "FrameBackend",
    "FrameFeed",
    "Frames",
    "backend_for",
    "frame_backend",
    "frame_path_device",
    "make_backend",
]
