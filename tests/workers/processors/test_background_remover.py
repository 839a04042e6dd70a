"""The background remover: the model's matte at the frame's size, the fill and the despill FaceFusion applies, the
corridor_key keyer's foreground and the u2net_cloth classes, batching that changes nothing, the torch converter's
parity with ONNX Runtime, the alpha a transparent chain carries to the encoder, the chain rules, and the names a job
can choose agreeing with the registry."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper

from shared.background_options import check_background_remover, rgba
from shared.containers import check_alpha
from shared.errors import InvalidOptionsError, ModelError
from shared.options import BackgroundRemoverModel, JobOptions, choices
from tests.support.background_replicas import clothes, ellipse, keyer, matting
from tests.support.faces import MODELS, clip_frames
from tests.support.replicas import install_replica, replica_settings
from workers.engines.onnx_to_torch import convert
from workers.matting import BackgroundRemover, despill, fill
from workers.models.registry import REGISTRY
from workers.pipeline import plane_refusal, run_stages, stages_of, with_alpha
from workers.processors import ProcessorContext, Work, build
from workers.processors.background_remover import BackgroundRemoverProcessor

GREEN = [0, 255, 0]


def _frames(count: int = 2) -> np.ndarray:
    return clip_frames("d18.mp4", slice(0, count))[:, ::4, ::4]  # 120 x 120: no multiple of any model's side


def _remover(tmp_path: Path, model: onnx.ModelProto, name: str) -> BackgroundRemover:
    install_replica(model, name, tmp_path / "models")
    return BackgroundRemover.load(name, replica_settings(tmp_path / "models"))  # type: ignore[arg-type]


def _inside_outside(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixels well inside the replica's shape and well outside it, at a frame's size (its edge is resampled)."""
    assert height == width
    inner = ellipse(height, radii=(0.3, 0.44))
    outer = ~ellipse(height, radii=(0.46, 0.6))
    return inner, outer


def test_the_matte_is_the_models_at_the_frames_size_and_the_fill_paints_the_background_alone(tmp_path: Path) -> None:
    frames = _frames()
    remover = _remover(tmp_path, matting("modnet"), "modnet")
    mattes, foreground = remover.mattes(frames)
    assert mattes.shape == frames.shape[:3] and mattes.dtype == np.uint8 and foreground is None
    inner, outer = _inside_outside(*frames.shape[1:3])
    assert (mattes[:, inner] == 255).all() and (mattes[:, outer] == 0).all()
    filled, alpha = remover.cut_out(frames, fill_colour=rgba(GREEN), despill_colour=rgba([0, 0, 0, 0]))
    assert np.array_equal(alpha, mattes)
    assert np.array_equal(filled[:, inner], frames[:, inner])  # the person as it was
    assert (filled[:, outer] == (0, 255, 0)).all()  # BGR green behind


def test_the_fill_colours_alpha_blends_it_over_the_background_and_zero_leaves_it(tmp_path: Path) -> None:
    frames = _frames(1)
    remover = _remover(tmp_path, matting("modnet"), "modnet")
    _, outer = _inside_outside(*frames.shape[1:3])
    half, _ = remover.cut_out(frames, fill_colour=(255, 255, 255, 128), despill_colour=(0, 0, 0, 0))
    expected = frames[:, outer].astype(float) * (1 - 128 / 255) + 255 * 128 / 255
    assert np.abs(half[:, outer] - expected).max() <= 1
    despilled, _ = remover.cut_out(frames, fill_colour=(255, 255, 255, 0), despill_colour=(0, 255, 0, 255))
    green = frames.astype(float)
    assert (despilled[..., 1] <= np.ceil((green[..., 0] + green[..., 2]) / 2) + 0.5).all()  # no green over the rest
    none, alpha = remover.cut_out(frames, fill_colour=(255, 255, 255, 0), despill_colour=(0, 0, 0, 0))
    assert np.array_equal(none, frames) and (alpha[:, outer] == 0).all()


def test_despill_pulls_the_screens_channel_down_to_the_mean_of_the_other_two() -> None:
    pixels = np.array([[[120, 200, 100], [90, 60, 30]]], np.float32)  # BGR: green spill, then no spill
    despill(pixels, (0, 255, 0, 255))
    assert pixels[0, 0].tolist() == [120, 110, 100] and pixels[0, 1].tolist() == [90, 60, 30]
    halfway = np.array([[[120, 200, 100]]], np.float32)
    despill(halfway, (0, 255, 0, 51))  # a fifth of the way
    assert halfway[0, 0, 1] == pytest.approx(200 - 90 / 5)
    untouched = np.array([[[120, 200, 100]]], np.float32)
    despill(untouched, (0, 255, 0, 0))
    assert untouched[0, 0].tolist() == [120, 200, 100]
    kept = np.array([[[120, 200, 100]]], np.uint8)
    assert fill(kept, np.zeros((1, 1), np.uint8), (9, 9, 9, 0)) is kept  # a fill whose alpha is 0 does nothing


def test_colours_are_read_as_facefusion_reads_one_to_four_values() -> None:
    assert [rgba(c) for c in ([7], [1, 2], [1, 2, 3], [1, 2, 3, 4])] == [
        (7, 7, 7, 255), (1, 2, 1, 255), (1, 2, 3, 255), (1, 2, 3, 4),
    ]  # fmt: skip
    with pytest.raises(ValueError):
        JobOptions.model_validate({"background_remover": {"fill_colour": [1, 2, 3, 4, 5]}})
    with pytest.raises(ValueError):
        JobOptions.model_validate({"background_remover": {"despill_colour": [256]}})


def test_the_model_is_fed_the_frame_resized_in_rgb_with_its_normalisation(tmp_path: Path) -> None:
    frames = _frames(1)
    tensor = _remover(tmp_path, matting("modnet"), "modnet").model_input(frames)
    assert tensor.shape == (1, 3, 512, 512) and tensor.dtype == np.float32
    assert -1.0 <= tensor.min() and tensor.max() <= 1.0  # modnet: (x / 255 - 0.5) / 0.5
    import cv2

    resized = cv2.resize(frames[0], (512, 512), interpolation=cv2.INTER_LINEAR)
    assert np.allclose(tensor[0, 0], resized[..., 2] / 127.5 - 1, atol=1e-6)  # R first
    keyed = _remover(tmp_path, keyer(), "corridor_key_1024").model_input(frames)
    assert keyed.shape == (1, 4, 1024, 1024)
    assert 0.0 <= keyed[:, 3].min() and keyed[:, 3].max() <= 1.0  # the green-screen hint, unnormalised


def test_a_batch_gives_the_mattes_its_frames_give_one_at_a_time(tmp_path: Path) -> None:
    remover = _remover(tmp_path, matting("modnet", residual=1.0), "modnet")
    frames = _frames(4)
    batched, _ = remover.mattes(frames)
    single = np.concatenate([remover.mattes(frames[i : i + 1])[0] for i in range(len(frames))])
    assert np.abs(batched.astype(int) - single).max() <= 1  # the engine's float sums in another order at most
    assert 0 < batched.mean() < 255 and len(np.unique(batched)) > 20  # the input shapes it: no constant matte


def test_corridor_key_replaces_the_frames_colour_with_its_foreground(tmp_path: Path) -> None:
    frames = _frames(1)
    remover = _remover(tmp_path, keyer(foreground=(0.2, 0.6, 0.4)), "corridor_key_1024")
    cut, alpha = remover.cut_out(frames, fill_colour=(0, 0, 0, 0), despill_colour=(0, 0, 0, 0))
    inner, outer = _inside_outside(*frames.shape[1:3])
    assert (alpha[:, inner] == 255).all() and (alpha[:, outer] == 0).all()
    assert np.abs(cut[:, inner].astype(int) - (102, 153, 51)).max() <= 1  # RGB (0.2, 0.6, 0.4) as BGR bytes


def test_u2net_cloth_keeps_what_is_not_its_background_class(tmp_path: Path) -> None:
    frames = _frames(1)
    mattes, _ = _remover(tmp_path, clothes(), "u2net_cloth").mattes(frames)
    inner, outer = _inside_outside(*frames.shape[1:3])
    assert (mattes[:, inner] == 255).all() and (mattes[:, outer] == 0).all()


def test_a_file_that_gives_another_layout_fails_with_a_model_error(tmp_path: Path) -> None:
    """A file under modnet's name that gives three channels, not a matte: refused, clearly."""
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 3, 512, 512]) for n in ("input", "output")]
    graph = helper.make_graph([helper.make_node("Identity", ["input"], ["output"])], "wrong", io[:1], io[1:])
    wrong = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    wrong.ir_version = 8
    with pytest.raises(ModelError, match=r"a matte model gives \[n, 1, 512, 512\]") as refused:
        _remover(tmp_path, wrong, "modnet").mattes(_frames(1))
    assert refused.value.code == "model_unavailable"


@pytest.mark.parametrize("name", ["modnet", "corridor_key_1024"])
def test_the_converter_runs_the_replica_as_onnx_runtime_does(name: str) -> None:
    batch = 2 if name == "modnet" else 1  # the keyer's 1024 px once is enough
    model = matting(name, residual=1.0, batch=batch) if name == "modnet" else keyer(name, residual=1.0, batch=batch)
    size, channels = (512, 3) if name == "modnet" else (1024, 4)
    feeds = {"input": np.random.default_rng(0).uniform(-1, 1, (batch, channels, size, size)).astype(np.float32)}
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    module = convert(model)
    with torch.inference_mode():
        actual = module(torch.from_numpy(feeds["input"]))
    assert len(actual) == len(expected) == (1 if name == "modnet" else 2)
    for ours, theirs in zip(actual, expected, strict=True):
        assert ours.shape == theirs.shape
        assert np.abs(ours.numpy() - theirs).max() <= 1e-4


def test_on_the_torch_engine_the_processor_cuts_out_as_on_onnx_runtime(tmp_path: Path) -> None:
    """The engine is chosen as for every model: the converted torch module (eager here; compiling is the engine
    tests') gives ONNX Runtime's frames and alpha, and says it took no slower path."""
    install_replica(matting("modnet", residual=1.0), "modnet", tmp_path / "models")
    options = JobOptions.model_validate(
        {"processors": ["background_remover"], "background_remover": {"fill_colour": GREEN, "transparent": True}}
    )
    frames = _frames(2)
    cut = {}
    for engine in ("onnxruntime", "torch"):
        settings = replica_settings(
            tmp_path / "models", engine=engine, torch_compile_mode="eager", torch_precision="fp32"
        )
        reported: list[object] = []
        context = ProcessorContext(options=options, sources=[], settings=settings, report=reported.append)
        processor = build("background_remover", context)
        assert isinstance(processor, BackgroundRemoverProcessor) and processor.gives_alpha
        cut[engine] = processor.cut_out(frames)
        assert reported == [], (engine, reported)
        assert type(processor.remover.engine).__name__.lower().startswith("torch" if engine == "torch" else "onnx")
    for ours, theirs in zip(cut["torch"], cut["onnxruntime"], strict=True):
        assert np.abs(ours.astype(int) - theirs).max() <= 1


def test_a_transparent_chain_hands_the_encoder_bgra_frames_in_order(tmp_path: Path) -> None:
    """Through the render path's stages: the matte travels beside the frames past the processors after it, and
    the last stage joins it as a fourth channel; a chain without transparency hands on BGR."""
    remover = BackgroundRemoverProcessor(
        _remover(tmp_path, matting("modnet"), "modnet"), fill_colour=GREEN, transparent=True
    )
    frames = _frames(3)
    out: list[np.ndarray] = []
    run_stages([frames[:2], frames[2:]], stages_of([remover]), out.append)
    joined = np.concatenate(out)
    assert joined.shape == (*frames.shape[:3], 4)
    inner, outer = _inside_outside(*frames.shape[1:3])
    assert (joined[:, inner, 3] == 255).all() and (joined[:, outer, 3] == 0).all()
    assert np.array_equal(joined[:, inner, :3], frames[:, inner])
    plain: list[np.ndarray] = []
    remover.gives_alpha = False
    run_stages([frames], stages_of([remover]), plain.append)
    assert plain[0].shape == frames.shape


def test_a_face_processor_after_the_remover_leaves_its_alpha_as_it_is(tmp_path: Path) -> None:
    """background_remover (transparent), then face_blur: faces are detected on the frames as decoded, blurred in
    the cut-out frames, and the matte reaches the encoder's stage untouched."""
    install_replica(matting("modnet"), "modnet", tmp_path / "models")
    shutil.copy(MODELS / "yunet_2023mar.onnx", tmp_path / "models" / "yunet_2023_mar.onnx")
    options = JobOptions.model_validate(
        {
            "processors": ["background_remover", "face_blur"],
            "background_remover": {"fill_colour": GREEN, "transparent": True},
            "face": {"blur_strict": False},
        }
    )
    context = ProcessorContext(options=options, sources=[], settings=replica_settings(tmp_path / "models"))
    processors = [build(name, context) for name in options.processors]
    frames = clip_frames("d18.mp4", slice(0, 2))
    out: list[np.ndarray] = []
    run_stages([frames], stages_of(processors), out.append)
    (joined,) = out
    assert joined.shape == (*frames.shape[:3], 4)
    inner, outer = _inside_outside(*frames.shape[1:3])
    assert (joined[:, inner, 3] == 255).all() and (joined[:, outer, 3] == 0).all()
    assert (joined[:, outer, :3] == (0, 255, 0)).all()
    face = (slice(None), slice(180, 300), slice(180, 300))  # d18's face, in the middle of the frame
    assert np.abs(joined[face][..., :3].astype(int) - frames[face]).mean() > 3  # blurred


def test_an_alpha_smaller_than_the_frames_is_resized_to_them() -> None:
    """After a frame enhancer the frames are larger than the matte found before it: the alpha follows them."""
    alpha = np.zeros((1, 4, 4), np.uint8)
    alpha[:, :, 2:] = 255
    work = with_alpha(Work(np.zeros((1, 8, 8, 3), np.uint8), alpha=alpha))
    assert work.frames.shape == (1, 8, 8, 4) and work.alpha is None
    assert (work.frames[0, :, :3, 3] == 0).all() and (work.frames[0, :, 5:, 3] == 255).all()


def test_the_remover_must_come_before_the_frame_enhancer_and_change_something() -> None:
    for chain in (
        ["background_remover"],
        ["face_blur", "background_remover"],
        ["background_remover", "frame_enhancer"],
    ):
        check_background_remover(JobOptions.model_validate({"processors": chain}))
    with pytest.raises(InvalidOptionsError, match="background_remover must come before frame_enhancer"):
        check_background_remover(JobOptions.model_validate({"processors": ["frame_enhancer", "background_remover"]}))
    unchanged = {"processors": ["background_remover"], "background_remover": {"fill_colour": [0, 0, 0, 0]}}
    with pytest.raises(InvalidOptionsError, match="would come out as it came"):
        check_background_remover(JobOptions.model_validate(unchanged))
    transparent = {**unchanged, "background_remover": {"fill_colour": [0, 0, 0, 0], "transparent": True}}
    check_background_remover(JobOptions.model_validate(transparent))


def test_transparency_needs_an_encoder_that_carries_alpha() -> None:
    asked = {"processors": ["background_remover"], "background_remover": {"transparent": True}}
    with pytest.raises(InvalidOptionsError, match="libx264 does not") as refused:
        check_alpha(JobOptions.model_validate(asked))
    assert refused.value.code == "options_invalid" and "prores_ks" in refused.value.message
    check_alpha(JobOptions.model_validate({**asked, "encoder": {"encoder": "prores_ks"}}))
    with pytest.raises(InvalidOptionsError, match="no lossless mode"):
        check_alpha(JobOptions.model_validate({"encoder": {"encoder": "prores_ks", "lossless": True}}))


def test_every_remover_a_job_can_choose_is_registered_with_its_facts_and_no_other() -> None:
    registered = {name for name, spec in REGISTRY.items() if spec.kind == "background_remover"}
    assert registered == set(choices(BackgroundRemoverModel))
    sides = {name: REGISTRY[name].input_size for name in registered}
    assert sides["modnet"] == 512 and sides["silueta"] == 320 and sides["u2net_cloth"] == 768
    assert sides["corridor_key_2048"] == 2048 and sides["rmbg_2.0"] == 1024
    assert all(REGISTRY[name].base == "models-3.6.0" for name in ("corridor_key_1024", "corridor_key_2048"))
    assert {REGISTRY[name].licence_id for name in ("rmbg_1.4", "rmbg_2.0")} == {"bria-rmbg"}
    assert REGISTRY["modnet"].licence_id == "apache-2.0" and REGISTRY["ben_2"].licence_id == "mit"
    assert JobOptions().background_remover.model_dump() == {
        "model": "modnet", "fill_colour": [0, 0, 0, 255], "despill_colour": [0, 0, 0, 0], "transparent": False,
    }  # fmt: skip


def test_a_chain_with_the_remover_says_why_its_frames_leave_the_planes(tmp_path: Path) -> None:
    """Not written against the frame back-ends yet: a torch-engine worker renders the chain as whole BGR frames on
    the host, and the reason it gives (the job's fallback warning) names the remover, rather than dropping it or
    its alpha."""
    processor = BackgroundRemoverProcessor(_remover(tmp_path, matting("modnet"), "modnet"), transparent=True)
    assert (
        plane_refusal([processor], width=64, height=64) == "BackgroundRemoverProcessor works on whole BGR frames only"
    )
