"""The face pipeline's pixel work as batched torch on the worker's device (CUDA, ROCm or the CPU).

One code path, two devices: CI runs it on the CPU; a GPU worker runs the same functions on its GPU, where the frames
stay from upload (as 4:2:0 planes) to download. Each module is a stage of the OpenCV/numpy path, written once in
torch: :mod:`~workers.device.colour` (4:2:0 ↔ BGR), :mod:`~workers.device.geometry` (similarity transforms solved
for all faces at once), :mod:`~workers.device.cropping` (batched crops, paste-back blended by masks),
:mod:`~workers.device.suppression` (NMS), :mod:`~workers.device.blurring` (``face_blur``, on the faces' regions of
the 4:2:0 planes), :mod:`~workers.device.pipeline` (a batch through them). Warps and Gaussian kernels are kornia's.

Not yet in the render path: a job's processors still run the OpenCV/numpy stages; these are the parts, each
tested against the host path's frames.
"""
