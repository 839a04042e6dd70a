"""Face enhancement on synthetic replicas: each enhancer's pre/post-processing, CodeFormer's weight."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import pytest

from tests.support import replicas
from tests.support.engines import CountingEngine
from tests.support.replicas import install_replica, replica_settings
from workers.engines.onnx import OnnxEngine
from workers.faces.enhancing import ENHANCERS, FaceEnhancer

REPLICAS: Mapping[str, Callable[..., onnx.ModelProto]] = {
    "gfpgan_1.4": replicas.gfpgan_1_4,
    "gpen_bfr_512": replicas.gpen_bfr_512,
    "codeformer": replicas.codeformer,
}


def _crops(count: int, seed: int = 0) -> npt.NDArray[np.uint8]:
    return np.random.default_rng(seed).integers(0, 256, (count, 512, 512, 3), dtype=np.uint8)


@pytest.mark.parametrize("name", list(REPLICAS))  # the rest: test_more_models.py
def test_every_enhancer_restores_a_batch_of_ffhq_crops(name: str, tmp_path: Path) -> None:
    install_replica(REPLICAS[name](), name, tmp_path / "models")
    enhancer = FaceEnhancer.load(name, replica_settings(tmp_path / "models"))  # type: ignore[arg-type]
    assert (enhancer.template, enhancer.size) == ("ffhq_512", 512)
    crops = _crops(2)

    enhanced = enhancer.enhance(crops, weight=0.3)

    assert enhanced.shape == crops.shape and enhanced.dtype == np.uint8
    assert not np.array_equal(enhanced, crops)
    # The replicas add a small correction to the input: the face stays where it was, in its colours.
    assert np.abs(enhanced.astype(int) - crops.astype(int)).mean() < 20


def test_codeformer_weight_is_fed_and_one_keeps_the_face_as_it_was(tmp_path: Path) -> None:
    install_replica(replicas.codeformer(), "codeformer", tmp_path / "models")
    enhancer = FaceEnhancer.load("codeformer", replica_settings(tmp_path / "models"))
    crops = _crops(2)

    np.testing.assert_array_equal(enhancer.enhance(crops, weight=1.0), crops)
    assert not np.array_equal(enhancer.enhance(crops, weight=0.0), crops)


def test_a_batch_is_one_engine_call_and_a_fixed_batch_model_is_looped(tmp_path: Path) -> None:
    dynamic = install_replica(replicas.gfpgan_1_4(), "gfpgan_1.4", tmp_path / "dynamic")
    fixed = install_replica(replicas.gfpgan_1_4(batch=1), "gfpgan_1.4", tmp_path / "fixed")
    crops = _crops(3)
    spec = ENHANCERS["gfpgan_1.4"]

    batched = CountingEngine(OnnxEngine.load(dynamic, replica_settings(tmp_path / "dynamic")))
    looped = CountingEngine(OnnxEngine.load(fixed, replica_settings(tmp_path / "fixed")))
    together = FaceEnhancer(spec, batched).enhance(crops)
    one_by_one = FaceEnhancer(spec, looped, fixed_batch=1).enhance(crops)

    assert batched.batches == [3] and looped.batches == [1, 1, 1]
    np.testing.assert_array_equal(together, one_by_one)


def test_bad_inputs_are_refused_clearly(tmp_path: Path) -> None:
    install_replica(replicas.gpen_bfr_512(), "gpen_bfr_512", tmp_path / "models")
    enhancer = FaceEnhancer.load("gpen_bfr_512", replica_settings(tmp_path / "models"))
    with pytest.raises(ValueError, match="512"):
        enhancer.enhance(np.zeros((1, 256, 256, 3), np.uint8))
    with pytest.raises(ValueError, match="weight"):
        enhancer.enhance(_crops(1), weight=1.5)
    assert enhancer.enhance(np.zeros((0, 512, 512, 3), np.uint8)).shape == (0, 512, 512, 3)
