"""Synthetic replicas of the Real-ESRGAN frame enhancers: the registry's I/O (``input`` [N, 3, 256, 256] RGB in
[0, 1] → ``output`` [N, 3, 256·s, 256·s]), a body whose output can be checked.

The output is the input resized bilinearly (half-pixel centres, edges clamped: what ``cv2.INTER_LINEAR`` gives)
plus ``residual`` times a small convolutional branch (conv, nearest upsample, conv) with random weights. With
``residual=0`` the model is a bilinear upscaler, so a frame upscaled through tiles can be compared with the whole
frame resized by OpenCV; with a residual, the branch reaches about 2 input pixels, under the tiles' overlap of 8.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.support.replicas import Batch, _Graph, _image

TILE = 256


def real_esrgan(
    scale: int, *, residual: float = 0.0, width: int = 4, seed: int = 0, batch: Batch = "N"
) -> onnx.ModelProto:
    """A ×``scale`` frame enhancer with the real I/O names and shapes."""
    g = _Graph(seed)
    scales = g.constant(np.array([1, 1, scale, scale], np.float32))
    base = g.node("Resize", ["input", "", scales], mode="linear", coordinate_transformation_mode="half_pixel")
    h = g.leaky(g.conv("input", 3, width, 3, pad=1), 0.2)
    h = g.node(
        "Resize", [h, "", scales], mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"
    )
    h = g.node("Tanh", [g.conv(h, width, 3, 3, pad=1)])
    branch = g.node("Mul", [h, g.constant(np.array(residual, np.float32))])
    g.rename(g.node("Add", [base, branch]), "output")
    output = helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 3, TILE * scale, TILE * scale])
    return g.model([_image("input", batch, TILE)], [output], f"real_esrgan_x{scale}")
