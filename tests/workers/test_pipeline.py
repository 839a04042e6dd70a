"""The overlapped stages of a chunk (workers/pipeline.py): order and count kept, errors stop everything, and a
``face_swapper → face_enhancer`` chain runs the detector once per frame (counted at the detector's engine, the
ONNX Runtime boundary)."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import numpy as np
import pytest

from shared.options import JobOptions
from tests.support.engines import CountingEngine
from tests.support.faces import MEDIA, MODELS, clip_frames, engine
from tests.support.replicas import arcface_w600k_r50, gfpgan_1_4, install_replica, inswapper_128, replica_settings
from workers.faces.detection import FaceDetector
from workers.pipeline import run_stages, stages_of
from workers.processors import FrameBatch, ProcessorContext, Work
from workers.processors.face_enhancer import FaceEnhancerProcessor
from workers.processors.face_swapper import FaceSwapperProcessor


def _batches(count: int, size: int) -> list[FrameBatch]:
    frames = np.arange(count, dtype=np.uint8).reshape(count, 1, 1, 1).repeat(3, axis=3)
    return [frames[start : start + size] for start in range(0, count, size)]


def test_stages_run_on_threads_of_their_own_and_keep_order_and_count() -> None:
    threads: set[str] = set()

    def stage(work: Work) -> Work:
        threads.add(threading.current_thread().name)
        work.frames = work.frames + 1
        return work

    out: list[FrameBatch] = []
    run_stages(_batches(50, 4), [stage, stage, stage], out.append)
    assert np.concatenate(out)[:, 0, 0, 0].tolist() == [i + 3 for i in range(50)]
    assert len(threads) == 3 and threading.current_thread().name not in threads


def test_each_batch_carries_the_chunk_number_of_its_first_frame() -> None:
    """A processor that needs a frame's place (lip_syncer's audio window) reads it off the batch."""
    seen: list[tuple[int | None, int]] = []

    def stage(work: Work) -> Work:
        seen.append((work.first, int(work.frames[0, 0, 0, 0])))
        return work

    run_stages(_batches(10, 4), [stage], lambda batch: None)
    assert seen == [(0, 0), (4, 4), (8, 8)]
    seen.clear()
    run_stages([Work(batch, first=20 + 4 * i) for i, batch in enumerate(_batches(8, 4))], [stage], lambda b: None)
    assert seen == [(20, 0), (24, 4)], "the feed's own numbers are kept"


def test_an_error_in_a_stage_stops_the_pipeline_and_reaches_the_caller() -> None:
    def failing(work: Work) -> Work:
        if int(work.frames[0, 0, 0, 0]) >= 8:
            raise RuntimeError("model failed")
        return work

    out: list[FrameBatch] = []
    with pytest.raises(RuntimeError, match="model failed"):
        run_stages(_batches(400, 4), [failing], out.append)
    assert sum(len(batch) for batch in out) == 8
    assert not [t for t in threading.enumerate() if t.name.startswith("pipeline-") and t.is_alive()]


@pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")
def test_a_swapper_then_enhancer_chain_detects_faces_once_per_frame(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
    install_replica(inswapper_128(), "inswapper_128", models)
    install_replica(gfpgan_1_4(), "gfpgan_1.4", models)
    settings = replica_settings(models, engine="onnxruntime")  # the count is the engine's business, not the speed
    options = JobOptions.model_validate(
        {
            "processors": ["face_swapper", "face_enhancer"],
            "face": {"swapper": "inswapper_128", "enhancer": "gfpgan_1.4"},
        }
    )
    context = ProcessorContext(options=options, sources=[MEDIA / "s0.jpg"], settings=settings)
    counting = CountingEngine(engine(MODELS / "yunet_2023mar.onnx"))
    detector = FaceDetector(counting, "yunet")
    swapper = FaceSwapperProcessor.from_context(context, detector=detector)
    enhancer = FaceEnhancerProcessor.from_context(context, detector=detector)
    frames = clip_frames("d18.mp4", slice(0, 12))
    counting.batches.clear()  # the source image's detection, when the swapper was built
    out: list[FrameBatch] = []
    run_stages([frames[:8], frames[8:]], stages_of([swapper, enhancer]), out.append)
    assert counting.calls == 12
    result = np.concatenate(out)
    assert result.shape == frames.shape
    assert all(np.abs(result[i].astype(int) - frames[i]).max() > 20 for i in range(12))  # every face was changed
