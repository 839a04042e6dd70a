"""The face pipeline's pixel work as batched torch on the worker's device (CUDA, ROCm or the CPU).

One code path, two devices: CI runs it on the CPU; a GPU worker runs the same functions on its GPU, where the frames
stay from upload (as 4:2:0 planes) to download. Each module is a stage of the OpenCV/numpy path, written once in
torch: :mod:`~workers.device.colour` (4:2:0 ↔ BGR), :mod:`~workers.device.geometry` (similarity transforms solved
for all faces at once), :mod:`~workers.device.cropping` (batched crops, paste-back blended by masks),
:mod:`~workers.device.suppression` (NMS), :mod:`~workers.device.blurring` (``face_blur``, on the faces' regions of
the 4:2:0 planes), :mod:`~workers.device.pipeline` (a batch through them). Warps and Gaussian kernels are kornia's.

In the render path where the worker's engine setting resolves to torch (:mod:`~workers.device.selection`):
:mod:`~workers.device.feed` carries a chunk's planes, :mod:`~workers.device.path` builds the chain's stages. Not
yet on the device: detection (ONNX Runtime on the host's BGR frames, as on the OpenCV path; the converted
detectors of :mod:`~workers.device.detection` find the same faces, not yet wired in), ``face_debugger``
and ``face_blur``'s ``pixelate`` style (those chains render on the OpenCV path, with a warning).
"""
