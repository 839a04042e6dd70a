"""The frame enhancer: tiles that cover a frame exactly once and are put back without a seam, the replicas of
Real-ESRGAN ×2/×4 through the loader, and the torch converter's parity with ONNX Runtime on them."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from shared.errors import ModelError
from shared.options import FRAME_ENHANCER_SCALES, JobOptions
from tests.support.faces import clip_frames, psnr
from tests.support.replicas import assert_torch_parity, install_replica, replica_settings
from tests.support.upscaler_replicas import real_esrgan
from workers.processors import ProcessorContext, build
from workers.processors.frame_enhancer import FrameEnhancerProcessor
from workers.upscaling import FrameEnhancer, Tiling


@pytest.mark.parametrize(("height", "width"), [(1, 1), (37, 53), (240, 480), (250, 481)])
def test_tiles_cover_each_frame_once_and_join_back_exactly_at_any_size(height: int, width: int) -> None:
    frames = np.random.default_rng(height).integers(0, 256, (2, height, width, 3), dtype=np.uint8)
    tiling = Tiling(64, 8)  # a 48 px core: none of these sizes is a multiple of it but 240 and 480
    tiles = tiling.split(frames)
    rows, cols = tiling.grid(height, width)
    assert tiles.shape == (2 * rows * cols, 64, 64, 3)
    assert np.array_equal(tiling.join(tiles, 2, height, width, scale=1), frames)
    # each tile upscaled on its own (nearest): the cores put together are the whole frame upscaled
    big = tiles.repeat(3, axis=1).repeat(3, axis=2)
    assert np.array_equal(tiling.join(big, 2, height, width, scale=3), frames.repeat(3, axis=1).repeat(3, axis=2))


@pytest.mark.parametrize("name", ["real_esrgan_x2", "real_esrgan_x4"])
def test_the_replica_upscales_d18_through_tiles_as_the_whole_frame_resized(name: str, tmp_path: Path) -> None:
    """A bilinear replica: tiled and batched, the frames equal OpenCV's bilinear resize of the whole frame (no seam),
    at a size that is no multiple of the tiles' 240 px core."""
    scale = FRAME_ENHANCER_SCALES[name]  # type: ignore[index]
    install_replica(real_esrgan(scale), name, tmp_path / "models")
    enhancer = FrameEnhancer.load(name, replica_settings(tmp_path / "models"))  # type: ignore[arg-type]
    frames = clip_frames("d18.mp4", slice(0, 2))[:, 97:360, 91:392]  # 263 x 301: 2 x 2 tiles each, one batch
    upscaled = enhancer.upscale(frames)
    assert upscaled.shape == (2, 263 * scale, 301 * scale, 3)
    for frame, big in zip(frames, upscaled, strict=True):
        whole = cv2.resize(frame, (301 * scale, 263 * scale), interpolation=cv2.INTER_LINEAR)
        assert psnr(big, whole) >= 40.0
        assert np.abs(big.astype(int) - whole).max() <= 1  # float rounding only


def test_the_processor_blends_the_upscaled_frame_over_the_resized_one(tmp_path: Path) -> None:
    install_replica(real_esrgan(2, residual=0.5), "real_esrgan_x2", tmp_path / "models")
    frames = clip_frames("d18.mp4", slice(0, 1))
    settings = replica_settings(tmp_path / "models")

    def run(blend: int) -> np.ndarray:
        options = JobOptions(processors=["frame_enhancer"], frame_enhancer={"blend": blend})
        processor = build("frame_enhancer", ProcessorContext(options=options, sources=[], settings=settings))
        assert isinstance(processor, FrameEnhancerProcessor) and processor.scale == 2
        return processor.process(frames)

    resized = cv2.resize(frames[0], (960, 960), interpolation=cv2.INTER_LINEAR)
    none, full, half = run(0)[0], run(100)[0], run(50)[0]
    assert np.abs(none.astype(int) - resized).max() <= 1  # blend 0: the input resized
    assert psnr(full, resized) < 35  # the replica's residual shows at 100
    assert np.abs(half.astype(int) - (full.astype(int) + resized) / 2).max() <= 1


@pytest.mark.parametrize("scale", [2, 4])
def test_the_converter_runs_the_replica_as_onnx_runtime_does(scale: int) -> None:
    assert_torch_parity(real_esrgan(scale, residual=0.1, batch=2))


def test_a_file_whose_scale_is_not_the_models_fails_with_a_model_error(tmp_path: Path) -> None:
    """A ×4 file under the ×2 name would make frames of another size than the encoder expects: refused, clearly."""
    install_replica(real_esrgan(4), "real_esrgan_x2", tmp_path / "models")
    enhancer = FrameEnhancer.load("real_esrgan_x2", replica_settings(tmp_path / "models"))
    with pytest.raises(ModelError, match=r"a x2 model gives \(3, 512, 512\)") as refused:
        enhancer.upscale(clip_frames("d18.mp4", slice(0, 1))[:, :100, :100])
    assert refused.value.code == "model_unavailable"
