"""``frame_enhancer`` on the torch frame back-end (:func:`workers.frames.torch.upscaled`): the tiles cut, run and
joined as tensors where the frames are (a torch engine's :meth:`run_on_device`; another engine through the host),
blended as OpenCV blends, and a chunk of ``face_blur`` + ``frame_enhancer`` as planes, on the host back-end and on
the torch one (CPU tensors standing in for the device), renders the planes whole BGR frames render, twice as
large."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import torch

from shared.options import JobOptions
from shared.processes import child_env
from tests.support.faces import clip_frames
from tests.support.media import psnr
from tests.support.replicas import install_replica, replica_settings
from tests.support.upscaler_replicas import real_esrgan
from workers.engines.torch_engine import TorchEngine
from workers.frames.feed import FrameFeed
from workers.frames.host import HostBackend
from workers.frames.torch import TorchBackend, blended, upscaled
from workers.pipeline import plane_refusal, run_stages, stages_of
from workers.processors import ProcessorContext, build
from workers.upscaling import FrameEnhancer, blend
from workers.video.ffmpeg import decode_args

SIDE = 480  # d18.mp4


def _enhancer(scale: int, engine: str, folder: Path, family: str = "cpu") -> FrameEnhancer:
    name = f"real_esrgan_x{scale}"
    install_replica(real_esrgan(scale, residual=0.3), name, folder / "models")
    settings = replica_settings(
        folder / "models", engine=engine, torch_compile_mode="eager", torch_precision="fp32", family=family
    )
    return FrameEnhancer.load(name, settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(("scale", "engine"), [(2, "torch"), (4, "torch"), (2, "onnxruntime")])
def test_frames_upscaled_as_tensors_are_the_host_paths_frames(scale: int, engine: str, tmp_path: Path) -> None:
    enhancer = _enhancer(scale, engine, tmp_path)
    assert isinstance(enhancer.engine, TorchEngine) == (engine == "torch")
    frames = clip_frames("d18.mp4", slice(0, 2))[:, 97:360, 91:392]  # 263 x 301: 2 x 2 tiles each, no multiple
    host = enhancer.upscale(frames)
    on_device = upscaled(enhancer, torch.from_numpy(frames).permute(0, 3, 1, 2))
    assert on_device.dtype == torch.uint8 and on_device.shape == (2, 3, 263 * scale, 301 * scale)
    device = on_device.permute(0, 2, 3, 1).numpy()
    for index in range(2):
        assert psnr(device[index], host[index]) >= 50, f"frame {index}"
        assert np.abs(device[index].astype(int) - host[index]).max() <= 1  # float rounding only


@pytest.mark.parametrize("percent", [0, 35, 80, 100])
def test_the_blend_is_opencvs(percent: int) -> None:
    frames = clip_frames("d18.mp4", slice(0, 2))[:, :120, :200]
    noise = np.random.default_rng(percent).integers(0, 256, (2, 240, 400, 3), dtype=np.uint8)
    expected = blend(frames, noise, percent)
    ours = blended(torch.from_numpy(frames).permute(0, 3, 1, 2), torch.from_numpy(noise).permute(0, 3, 1, 2), percent)
    got = ours.permute(0, 2, 3, 1).numpy()
    difference = np.abs(got.astype(int) - expected)
    # OpenCV's resize truncates inside its fixed point: a few values one off from the exact bilinear rounding
    assert difference.max() <= 1 and (difference == 0).mean() > 0.95
    assert psnr(got.reshape(-1, 400, 3), expected.reshape(-1, 400, 3)) >= 55


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    folder = tmp_path_factory.mktemp("device-upscaling") / "models"
    folder.mkdir()
    shutil.copy(data_dir / "models" / "yunet_2023mar.onnx", folder / "yunet_2023_mar.onnx")
    install_replica(real_esrgan(2, residual=0.3), "real_esrgan_x2", folder)
    return folder


def test_a_blurred_and_enhanced_chunk_in_the_gpus_flow_renders_the_opencv_paths_planes(
    models: Path, data_dir: Path
) -> None:
    frames = 6
    raw = subprocess.run(
        decode_args(data_dir / "media" / "d18.mp4", 0, frames, "yuv420p"), capture_output=True, check=True,
        env=child_env(),
    )  # fmt: skip
    planes = np.frombuffer(raw.stdout, np.uint8).reshape(frames, SIDE * 3 // 2, SIDE)
    job: dict[str, Any] = {"processors": ["face_blur", "frame_enhancer"], "face": {"blur_strict": False}}
    settings = replica_settings(models, engine="torch", torch_compile_mode="eager", torch_precision="fp32")
    options = JobOptions.model_validate(job)
    context = ProcessorContext(options=options, sources=[], settings=settings)

    def render(backend: HostBackend | TorchBackend | None) -> np.ndarray:
        processors = [build(name, context) for name in options.processors]
        out: list[np.ndarray] = []
        batches = [planes[i : i + 4].copy() for i in range(0, frames, 4)]
        if backend is None:  # whole BGR frames, converted by the encoder's pipe
            bgr = [np.stack([cv2.cvtColor(f, cv2.COLOR_YUV2BGR_I420) for f in b]) for b in batches]
            run_stages(bgr, stages_of(processors), out.append)
            return np.stack([cv2.cvtColor(f, cv2.COLOR_BGR2YUV_I420) for f in np.concatenate(out)])
        assert plane_refusal(processors, SIDE, SIDE) is None
        feed = FrameFeed(backend)
        run_stages(feed.frames(batches), stages_of(processors, feed), out.append)  # type: ignore[arg-type]
        return np.concatenate(out)

    opencv, host, device = render(None), render(HostBackend()), render(TorchBackend("cpu"))
    assert opencv.shape == host.shape == device.shape == (frames, SIDE * 3, SIDE * 2)
    resized = np.stack([cv2.resize(p, (SIDE * 2, SIDE * 3), interpolation=cv2.INTER_NEAREST) for p in planes])
    for index in range(frames):  # 68 and 66 dB measured: the blur's and the resize's rounding
        assert psnr(host[index], opencv[index]) >= 60, f"frame {index}"
        assert psnr(device[index], opencv[index]) >= 60, f"frame {index}"
        assert psnr(device[index], resized[index]) < 40, f"frame {index}: not enhanced"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=f"no GPU: torch {torch.__version__} sees no CUDA device")
def test_on_a_gpu_frames_upscaled_there_are_the_host_paths_frames(tmp_path: Path) -> None:
    enhancer = _enhancer(2, "torch", tmp_path, family="cuda")
    frames = clip_frames("d18.mp4", slice(0, 2))
    host = enhancer.upscale(frames)
    on_device = upscaled(enhancer, torch.from_numpy(frames).permute(0, 3, 1, 2).to("cuda"))
    assert on_device.device.type == "cuda"
    device = on_device.permute(0, 2, 3, 1).cpu().numpy()
    for index in range(2):  # the GPU's floating point may differ in the last bits
        assert psnr(device[index], host[index]) >= 45, f"frame {index}"
