"""The frame colouriser: the frames' grey in, the model's colour out joined with each frame's own lightness, the
replicas of DDColor and DeOldify through the loader, batching that changes nothing, the blend, the torch converter's
parity with ONNX Runtime, the chain rule, and the names a job can choose agreeing with the registry."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from shared.errors import InvalidOptionsError, ModelError
from shared.options import FrameColorizerModel, FrameColorizerSize, JobOptions, choices
from shared.output_frames import check_chain
from tests.support.colorizer_replicas import ddcolor, deoldify
from tests.support.faces import clip_frames
from tests.support.replicas import install_replica, replica_settings
from workers.colorizing import FrameColorizer
from workers.engines.onnx_to_torch import convert
from workers.models.registry import REGISTRY
from workers.pipeline import plane_refusal
from workers.processors import ProcessorContext, build
from workers.processors.frame_colorizer import FrameColorizerProcessor

SIZE = 192  # the smallest size a job can choose: the cheapest


def _frames(count: int = 2) -> np.ndarray:
    return clip_frames("d18.mp4", slice(0, count))[:, 100:196, 120:248]  # 96 x 128: no multiple of the model's size


def _lab(frames: np.ndarray) -> np.ndarray:
    return np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2LAB) for frame in frames]).astype(float)


def _colorizer(tmp_path: Path, model: onnx.ModelProto, name: str, size: int = SIZE) -> FrameColorizer:
    install_replica(model, name, tmp_path / "models")
    return FrameColorizer.load(name, size, replica_settings(tmp_path / "models"))  # type: ignore[arg-type]


def test_ddcolor_gives_each_frame_the_models_colour_under_its_own_lightness(tmp_path: Path) -> None:
    """A replica whose a, b is (12, -10) everywhere: every frame comes out with that colour and its own lightness."""
    frames = _frames()
    coloured = _colorizer(tmp_path, ddcolor(tint=(12.0, -10.0)), "ddcolor").colorize(frames)
    assert coloured.shape == frames.shape and coloured.dtype == np.uint8
    before, after = _lab(frames), _lab(coloured)
    assert np.abs(after[..., 0] - before[..., 0]).mean() < 1.5  # the lightness kept (8-bit rounding, gamut)
    # 8-bit Lab: a, b offset by 128; float Lab's a, b units are the same
    assert np.median(after[..., 1]) == pytest.approx(128 + 12, abs=2)
    assert np.median(after[..., 2]) == pytest.approx(128 - 10, abs=2)
    assert np.abs(before[..., 1:] - after[..., 1:]).mean() > 3  # the frame's own colour is gone


def test_deoldify_gives_each_frame_the_models_colour_under_its_own_lightness(tmp_path: Path) -> None:
    """A replica that adds red and takes blue from the grey it is fed: the frames come out warm, lightness kept."""
    frames = _frames()
    coloured = _colorizer(tmp_path, deoldify(tint=(40.0, 0.0, -30.0)), "deoldify").colorize(frames)
    before, after = _lab(frames), _lab(coloured)
    assert np.abs(after[..., 0] - before[..., 0]).mean() < 1.5
    assert np.median(after[..., 1]) > 128 + 8 and np.median(after[..., 2]) > 128 + 8  # red and yellow
    assert np.abs(before[..., 1:] - after[..., 1:]).mean() > 3


@pytest.mark.parametrize("name", ["ddcolor", "deoldify"])
def test_a_batch_is_coloured_exactly_as_its_frames_one_at_a_time(name: str, tmp_path: Path) -> None:
    model = ddcolor(residual=1.0) if name == "ddcolor" else deoldify(residual=1.0)
    colorizer = _colorizer(tmp_path, model, name)
    frames = _frames(4)
    batched = colorizer.colorize(frames)
    single = np.concatenate([colorizer.colorize(frames[i : i + 1]) for i in range(len(frames))])
    assert np.abs(batched.astype(int) - single).max() <= 1  # the engine's float sums in another order at most


def test_the_model_is_fed_the_frames_grey_at_the_jobs_size(tmp_path: Path) -> None:
    frames = _frames()
    grey = _colorizer(tmp_path, ddcolor(), "ddcolor", 256).model_input(frames)
    assert grey.shape == (2, 3, 256, 256) and grey.dtype == np.float32
    assert 0.0 <= grey.min() and grey.max() <= 1.0
    assert np.abs(grey[:, 0] - grey[:, 1]).max() < 1e-3 and np.abs(grey[:, 1] - grey[:, 2]).max() < 1e-3
    raw = _colorizer(tmp_path, deoldify(), "deoldify", 384).model_input(frames)
    assert raw.shape == (2, 3, 384, 384) and raw.max() > 1.0  # DeOldify takes 0-255 as is
    expected = cv2.resize(cv2.cvtColor(frames[0], cv2.COLOR_BGR2GRAY), (384, 384), interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(raw[0, 0], expected.astype(np.float32))


def test_the_processor_blends_the_coloured_frame_over_the_frame_as_it_came(tmp_path: Path) -> None:
    install_replica(ddcolor(residual=0.5), "ddcolor", tmp_path / "models")
    settings = replica_settings(tmp_path / "models")
    frames = _frames(1)

    def run(blend: int) -> np.ndarray:
        options = JobOptions(processors=["frame_colorizer"], frame_colorizer={"blend": blend, "size": SIZE})
        processor = build("frame_colorizer", ProcessorContext(options=options, sources=[], settings=settings))
        assert isinstance(processor, FrameColorizerProcessor)
        return processor.process(frames)[0]

    none, full, half = run(0), run(100), run(50)
    assert np.array_equal(none, frames[0])  # blend 0: the frame as it came
    assert np.abs(full.astype(int) - frames[0]).mean() > 2
    assert np.abs(half.astype(int) - (full.astype(int) + frames[0]) / 2).max() <= 1


@pytest.mark.parametrize("name", ["ddcolor", "deoldify"])
def test_the_converter_runs_the_replica_as_onnx_runtime_does(name: str) -> None:
    model = ddcolor(residual=1.0, batch=2) if name == "ddcolor" else deoldify(residual=1.0, batch=2)
    scale = 1.0 if name == "ddcolor" else 255.0
    feeds = {"input": np.random.default_rng(0).uniform(0, scale, (2, 3, 24, 40)).astype(np.float32)}
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        (actual,) = module(torch.from_numpy(feeds["input"]))
    assert actual.shape == expected.shape == (2, 2 if name == "ddcolor" else 3, 24, 40)
    assert np.abs(actual.numpy() - expected).max() <= 1e-3 * scale


def test_a_file_that_gives_another_models_colour_fails_with_a_model_error(tmp_path: Path) -> None:
    """A DeOldify file under DDColor's name gives three channels, not a, b: refused, clearly."""
    colorizer = _colorizer(tmp_path, deoldify(), "ddcolor")
    with pytest.raises(ModelError, match=r"a ddcolor model gives \(2, 192, 192\)") as refused:
        colorizer.colorize(_frames(1))
    assert refused.value.code == "model_unavailable"


def test_the_colouriser_may_sit_anywhere_before_the_frame_enhancer_but_not_after_it() -> None:
    for chain in (["frame_colorizer"], ["face_blur", "frame_colorizer"], ["frame_colorizer", "frame_enhancer"]):
        check_chain(JobOptions.model_validate({"processors": chain}))
    with pytest.raises(InvalidOptionsError, match="frame_enhancer must be the last processor"):
        check_chain(JobOptions.model_validate({"processors": ["frame_enhancer", "frame_colorizer"]}))


def test_every_colouriser_a_job_can_choose_is_registered_with_its_licence_and_no_other() -> None:
    registered = {name for name, spec in REGISTRY.items() if spec.kind == "frame_colorizer"}
    assert registered == set(choices(FrameColorizerModel))
    licences = {name: REGISTRY[name].licence for name in registered}
    assert all("Apache-2.0" in licences[name] for name in ("ddcolor", "ddcolor_artistic"))
    assert all("MIT" in licences[name] for name in ("deoldify", "deoldify_artistic", "deoldify_stable"))
    assert set(choices(FrameColorizerSize)) == {192, 256, 384, 512}
    assert JobOptions().frame_colorizer.model_dump() == {"model": "ddcolor", "size": 256, "blend": 100}


@pytest.mark.parametrize("name", ["ddcolor", "deoldify"])
def test_on_the_torch_engine_the_processor_colours_as_on_onnx_runtime(name: str, tmp_path: Path) -> None:
    """The engine is chosen as for every model: the converted torch module (eager here; compiling is the engine
    tests') colours the frames as ONNX Runtime does, and says it took no slower path."""
    install_replica(ddcolor(residual=1.0) if name == "ddcolor" else deoldify(residual=1.0), name, tmp_path / "models")
    options = JobOptions(processors=["frame_colorizer"], frame_colorizer={"model": name, "size": SIZE})
    frames = _frames(3)
    coloured = {}
    for engine in ("onnxruntime", "torch"):
        settings = replica_settings(
            tmp_path / "models", engine=engine, torch_compile_mode="eager", torch_precision="fp32"
        )
        reported: list[object] = []
        context = ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
        processor = build("frame_colorizer", context)
        assert isinstance(processor, FrameColorizerProcessor)
        coloured[engine] = processor.process(frames)
        assert reported == [], (engine, reported)
        assert type(processor.colorizer.engine).__name__.lower().startswith("torch" if engine == "torch" else "onnx")
    assert np.abs(coloured["torch"].astype(int) - coloured["onnxruntime"]).max() <= 1


def test_a_chain_with_the_colouriser_says_why_its_frames_leave_the_planes(tmp_path: Path) -> None:
    """Not written against the frame back-ends yet: a torch-engine worker renders the chain as whole BGR frames on
    the host, and the reason it gives (the job's fallback warning) names the colouriser, rather than dropping it or
    failing."""
    processor = FrameColorizerProcessor(_colorizer(tmp_path, ddcolor(), "ddcolor"))
    reason = plane_refusal([processor], width=64, height=64)
    assert reason == "FrameColorizerProcessor works on whole BGR frames only"
