"""Batches fitted to memory: the fit, the host's memory, and the out-of-memory back-off through the memory seam —
down to a face swap on a simulated small GPU that gives the same frames as a run one face at a time."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from shared.errors import RetryableError
from shared.options import FaceOptions, JobOptions
from tests.support.faces import MEDIA, MODELS, clip_frames
from tests.support.replicas import arcface_w600k_r50, install_replica, inswapper_128, replica_settings
from workers.engines.base import Engine, Tensor
from workers.engines.batching import FittedBatches
from workers.engines.memory import HostMemory, fitted_batch
from workers.engines.onnx import OnnxEngine
from workers.faces.swapping import SWAPPERS, EmapProjection, FaceSwapper, read_emap
from workers.processors import ProcessorContext
from workers.processors.face_swapper import FaceSwapperProcessor

MIB = 2**20


class SimulatedOutOfMemory(RuntimeError):
    """What the simulated GPU raises, as torch raises ``torch.cuda.OutOfMemoryError``."""


class SimulatedGpu:
    """A small GPU: ``capacity`` bytes, ``per_item`` bytes per face; reports ``capacity`` free."""

    def __init__(self, capacity: int, per_item: int) -> None:
        self.capacity, self.per_item = capacity, per_item
        self.released = 0

    @property
    def device(self) -> str:
        return "simulated:0"

    def free_bytes(self) -> int:
        return self.capacity

    def used_bytes(self) -> int:
        return 0

    def reset_peak(self) -> None:
        return None

    def peak_bytes(self) -> int:
        return 0

    def release(self) -> None:
        self.released += 1

    def is_out_of_memory(self, error: BaseException) -> bool:
        return isinstance(error, SimulatedOutOfMemory)

    def allocate(self, items: int) -> None:
        if items * self.per_item > self.capacity:
            raise SimulatedOutOfMemory(f"out of memory: {items} items need {items * self.per_item} bytes")


class OnSimulatedGpu:
    """An engine whose batches take memory on a :class:`SimulatedGpu`; records the batch sizes it ran."""

    def __init__(self, engine: Engine, gpu: SimulatedGpu) -> None:
        self.engine, self.gpu = engine, gpu
        self.batches: list[int] = []

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.engine.input_names

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.engine.output_names

    def run(self, inputs: Mapping[str, Tensor]) -> list[Tensor]:
        items = len(next(iter(inputs.values())))
        self.gpu.allocate(items)
        self.batches.append(items)
        return self.engine.run(inputs)

    def warmup(self) -> None:
        self.engine.warmup()


def test_the_fitted_batch_is_the_largest_power_of_two_that_fits() -> None:
    assert fitted_batch(10 * 1024 * MIB, 600 * MIB, 0.8, 64) == 8  # 13.6 fit
    assert fitted_batch(10 * 1024 * MIB, 100 * MIB, 0.8, 64) == 64  # 81 fit: the limit
    assert fitted_batch(10 * 1024 * MIB, 100 * MIB, 0.8, 48) == 32
    assert fitted_batch(100 * MIB, 600 * MIB, 0.8, 64) == 1  # nothing fits: one at a time, never zero
    assert fitted_batch(100 * MIB, 0, 0.8, 16) == 16  # nothing measured: the limit


def test_host_memory_reads_this_process_and_caps_free_memory_at_the_budget(tmp_path: Path) -> None:
    host = HostMemory()
    assert host.free_bytes() > 0 and host.used_bytes() > 0
    host.reset_peak()
    assert host.peak_bytes() >= host.used_bytes() // 2
    budget = HostMemory(budget_bytes=host.used_bytes() + 64 * MIB)
    assert 0 < budget.free_bytes() <= 64 * MIB + 16 * MIB
    assert HostMemory(budget_bytes=1).free_bytes() == 0
    assert HostMemory(proc=tmp_path).peak_bytes() == 0  # no /proc: nothing measured, nothing fitted
    assert host.is_out_of_memory(MemoryError()) and host.is_out_of_memory(RuntimeError("CUDA out of memory."))
    assert not host.is_out_of_memory(ValueError("bad shape"))


def _items(count: int) -> npt.NDArray[np.int64]:
    return np.arange(count, dtype=np.int64)


def test_an_out_of_memory_halves_the_batch_retries_the_same_items_and_remembers_the_cap() -> None:
    gpu = SimulatedGpu(capacity=15 * MIB, per_item=MIB)
    seen: list[list[int]] = []

    def step(batch: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        seen.append(batch.tolist())
        gpu.allocate(len(batch))
        return batch * 10

    batches = FittedBatches(32, memory=gpu)
    assert batches.map(_items(40), step).tolist() == [i * 10 for i in range(40)]
    assert [len(b) for b in seen] == [32, 16, 8, 8, 8, 8, 8]
    assert seen[0][:16] == seen[1] and seen[1][:8] == seen[2]  # the same faces, again
    assert (batches.cap, batches.backoffs, gpu.released) == (8, 2, 2)
    seen.clear()
    batches.map(_items(10), step)
    assert [len(b) for b in seen] == [8, 2]  # the cap stays


def test_a_batch_is_fitted_to_free_memory_when_the_per_item_peak_is_known() -> None:
    gpu = SimulatedGpu(capacity=100 * MIB, per_item=MIB)
    batches = FittedBatches(64, memory=gpu, per_item_bytes=20 * MIB, safety=0.8)
    assert batches.size() == 4  # 100 MiB × 0.8 / 20 MiB = 4


def test_a_single_item_that_does_not_fit_is_a_retryable_error_and_other_errors_pass_through() -> None:
    gpu = SimulatedGpu(capacity=MIB // 2, per_item=MIB)

    def step(batch: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        gpu.allocate(len(batch))
        return batch

    with pytest.raises(RetryableError) as raised:
        FittedBatches(4, memory=gpu).map(_items(4), step)
    assert raised.value.code == "out_of_memory"

    def broken(batch: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError, match="not a memory problem"):
        FittedBatches(4, memory=gpu).map(_items(4), broken)


@pytest.mark.skipif(not MODELS.exists(), reason="the reference data folder is not beside the checkout")
def test_a_swap_on_a_small_gpu_that_runs_out_at_16_faces_gives_the_frames_of_a_one_face_run(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(MODELS / "yunet_2023mar.onnx", models / "yunet_2023_mar.onnx")
    install_replica(arcface_w600k_r50(), "arcface_w600k_r50", models)
    path = install_replica(inswapper_128(), "inswapper_128", models)
    settings = replica_settings(models)
    context = ProcessorContext(
        JobOptions(processors=["face_swapper"], face=FaceOptions(swapper="inswapper_128")), [MEDIA / "s0.jpg"], settings
    )
    engine = OnnxEngine.load(path, settings)
    latent = EmapProjection(read_emap(path))
    frames = clip_frames("d18.mp4", slice(0, 32))

    # Warm-up underestimated the per-item peak by half: the fit plans 16 faces, the GPU holds 15.
    gpu = SimulatedGpu(capacity=15 * MIB, per_item=MIB)
    small = OnSimulatedGpu(engine, gpu)
    fitted = FittedBatches(32, memory=gpu, per_item_bytes=MIB // 2, safety=0.8)
    swapper = FaceSwapper(SWAPPERS["inswapper_128"], small, latent, batches=fitted)
    on_gpu = FaceSwapperProcessor.from_context(context, swapper=swapper).process(frames)

    one_at_a_time = FaceSwapperProcessor.from_context(
        context, swapper=FaceSwapper(SWAPPERS["inswapper_128"], engine, latent)
    )
    one_at_a_time.batches = FittedBatches(1)
    reference = one_at_a_time.process(frames)

    faces = sum(small.batches)
    assert faces >= 16, "the clip should have enough faces to fill a batch of 16"
    assert small.batches[0] <= 8 and fitted.backoffs == 1 and fitted.cap == 8
    assert np.array_equal(on_gpu, reference)
    assert not np.array_equal(on_gpu, frames)
