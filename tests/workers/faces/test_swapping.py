"""Face swapping on synthetic replicas: each swapper's pre/post-processing, source latent and batching."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime
import pytest

from shared.settings import Settings
from tests.support import replicas
from tests.support.engines import CountingEngine
from tests.support.replicas import install_replica, realistic_emap, replica_settings
from workers.engines.base import Tensor
from workers.engines.onnx import OnnxEngine
from workers.faces.swapping import SWAPPERS, EmapProjection, FaceSwapper, read_emap
from workers.models.download import resolve

REPLICAS: Mapping[str, list[tuple[str, Callable[[], onnx.ModelProto]]]] = {
    "inswapper_128": [("inswapper_128", replicas.inswapper_128)],
    "inswapper_128_fp16": [("inswapper_128_fp16", lambda: replicas.inswapper_128(fp16=True))],
    "hyperswap_1a_256": [("hyperswap_1a_256", replicas.hyperswap_1a_256)],
    "simswap_256": [("simswap_256", replicas.simswap_256), ("crossface_simswap", replicas.crossface_simswap)],
}


def _install(tmp_path: Path, name: str) -> Settings:
    for file_name, build in REPLICAS[name]:
        install_replica(build(), file_name, tmp_path / "models")
    return replica_settings(tmp_path / "models")


def _crops(count: int, size: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    return np.random.default_rng(seed).integers(0, 256, (count, size, size, 3), dtype=np.uint8)


def _embeddings(count: int, seed: int = 0) -> npt.NDArray[np.float32]:
    return (np.random.default_rng(seed).normal(size=(count, 512)) * 20).astype(np.float32)


@pytest.mark.parametrize("name", list(REPLICAS))  # the rest: test_more_models.py
def test_every_swapper_swaps_a_batch_of_crops_at_its_own_size(name: str, tmp_path: Path) -> None:
    swapper = FaceSwapper.load(name, _install(tmp_path, name))  # type: ignore[arg-type]
    assert swapper.size == SWAPPERS[name].model.input_size  # type: ignore[index]
    assert swapper.template == SWAPPERS[name].model.template  # type: ignore[index]

    crops = _crops(3, swapper.size)
    latent = swapper.source_latent(_embeddings(2))
    swapped = swapper.swap(crops, latent)
    other = swapper.swap(crops, swapper.source_latent(_embeddings(2, seed=1)))

    assert latent.shape == (512,) and latent.dtype == np.float32
    assert swapped.shape == crops.shape and swapped.dtype == np.uint8
    assert not np.array_equal(swapped, crops), "the model's output replaced the crops"
    assert not np.array_equal(swapped, other), "a different source identity gives a different face"


def test_inswapper_latent_is_facefusions_emap_projection_of_the_last_initializer(tmp_path: Path) -> None:
    swapper = FaceSwapper.load("inswapper_128", _install(tmp_path, "inswapper_128"))
    embedding = _embeddings(1)

    latent = swapper.source_latent(embedding)

    unit = embedding[0] / np.linalg.norm(embedding[0])
    np.testing.assert_allclose(latent, unit @ realistic_emap() / np.linalg.norm(unit), rtol=1e-5, atol=1e-5)
    assert 3.0 < np.linalg.norm(latent) < 5.0, "FaceFusion feeds the projection without re-normalising it"


def test_an_emap_asked_for_by_threads_at_once_is_read_from_its_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker warming its models while its first task asks for the swapper: each read holds the whole model file
    in memory (530 MB for inswapper), so a second thread waits for the first's emap instead of reading beside it."""
    path = resolve("inswapper_128", _install(tmp_path, "inswapper_128"))
    loads: list[str] = []
    load = onnx.load

    def slow_load(file: str) -> onnx.ModelProto:  # long enough that every thread asks while the first one reads
        loads.append(file)
        time.sleep(0.3)
        return load(file)

    monkeypatch.setattr(onnx, "load", slow_load)
    together = threading.Barrier(4)

    def read(_: int) -> npt.NDArray[np.float32]:
        together.wait()
        return read_emap(path)

    with ThreadPoolExecutor(4) as pool:
        emaps = list(pool.map(read, range(4)))
    assert len(loads) == 1
    for emap in emaps:
        np.testing.assert_array_equal(emap, realistic_emap())
    emaps[0][0, 0] += 1  # each caller gets its own copy
    np.testing.assert_array_equal(emaps[1], realistic_emap())


def test_the_identity_of_several_sources_is_the_mean_of_their_normalised_embeddings() -> None:
    engine = _NoEngine()
    emap = realistic_emap()
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], engine, EmapProjection(emap))
    a, b = _embeddings(2)

    together = swapper.source_latent(np.stack([a * 3.0, b * 0.5]))  # raw scale must not weigh a source more

    mean = a / np.linalg.norm(a) + b / np.linalg.norm(b)
    np.testing.assert_allclose(together, mean @ emap / np.linalg.norm(mean), rtol=1e-5, atol=1e-5)


def test_hyperswap_latent_is_the_unit_identity(tmp_path: Path) -> None:
    swapper = FaceSwapper.load("hyperswap_1a_256", _install(tmp_path, "hyperswap_1a_256"))
    embedding = _embeddings(1)
    np.testing.assert_allclose(swapper.source_latent(embedding), embedding[0] / np.linalg.norm(embedding[0]), rtol=1e-6)


def test_simswap_latent_goes_through_crossface_then_is_normalised(tmp_path: Path) -> None:
    settings = _install(tmp_path, "simswap_256")
    swapper = FaceSwapper.load("simswap_256", settings)
    embedding = _embeddings(1)

    crossface = onnxruntime.InferenceSession(
        str(tmp_path / "models" / "crossface_simswap.onnx"), providers=["CPUExecutionProvider"]
    )
    unit = (embedding / np.linalg.norm(embedding)).astype(np.float32)
    converted = crossface.run(None, {"input": unit})[0][0]
    np.testing.assert_allclose(
        swapper.source_latent(embedding), converted / np.linalg.norm(converted), rtol=1e-5, atol=1e-6
    )


def test_the_identity_swapper_round_trips_crops_exactly_in_one_engine_call(tmp_path: Path) -> None:
    path = install_replica(replicas.identity_swapper(), "inswapper_128", tmp_path / "models")
    engine = CountingEngine(OnnxEngine.load(path, replica_settings(tmp_path / "models")))
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], engine, EmapProjection(realistic_emap()))
    crops = _crops(6, 128)

    swapped = swapper.swap(crops, swapper.source_latent(_embeddings(1)))

    np.testing.assert_array_equal(swapped, crops)
    assert engine.batches == [6]


def test_a_fixed_batch_one_model_is_looped_and_still_exact(tmp_path: Path) -> None:
    install_replica(replicas.identity_swapper(batch=1), "inswapper_128", tmp_path / "models")
    swapper = FaceSwapper.load("inswapper_128", replica_settings(tmp_path / "models"))
    crops = _crops(3, 128)

    np.testing.assert_array_equal(swapper.swap(crops, swapper.source_latent(_embeddings(1))), crops)


def test_the_constant_colour_swapper_paints_every_face_in_that_bgr_colour(tmp_path: Path) -> None:
    colour = (10, 120, 250)  # blue, green, red: a channel-order mistake would show
    install_replica(replicas.constant_colour_swapper(colour), "inswapper_128", tmp_path / "models")
    swapper = FaceSwapper.load("inswapper_128", replica_settings(tmp_path / "models"))

    swapped = swapper.swap(_crops(2, 128), swapper.source_latent(_embeddings(1)))

    assert (swapped.reshape(-1, 3) == colour).all()


def test_bad_inputs_are_refused_clearly() -> None:
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], _NoEngine(), EmapProjection(realistic_emap()))
    latent = swapper.source_latent(_embeddings(1))
    with pytest.raises(ValueError, match="128"):
        swapper.swap(_crops(1, 256), latent)
    with pytest.raises(ValueError, match="zeros"):
        swapper.source_latent(np.zeros((1, 512), np.float32))
    with pytest.raises(ValueError, match="512"):
        swapper.source_latent(np.ones((1, 128), np.float32))
    assert swapper.swap(_crops(0, 128), latent).shape == (0, 128, 128, 3)


class _NoEngine:
    """An engine with inswapper's inputs that must never be run."""

    input_names = ("target", "source")
    output_names = ("output",)

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        raise AssertionError("not expected to run")

    def warmup(self) -> None:
        raise AssertionError("not expected to run")
