"""A model exported on one thread (a trial quantising it) while another compiles (the render thread's first call of
a bucket): both succeed. They share torch's process-wide tracing state; unserialised, the compile was ignored
("torch.compile is ignored when called inside torch.export region") and the model ran eagerly, and the export
failed ("'GraphModule' object has no attribute '_in_spec'")."""

from __future__ import annotations

import threading

import pytest
import torch

from tests.support.quant_replicas import crops
from tests.support.swapper_replicas import swapper
from workers.engines.onnx_to_torch import convert
from workers.engines.quantising import export
from workers.engines.torch_engine import TorchEngine


@pytest.mark.slow
def test_models_compile_while_another_thread_exports_one() -> None:
    exported = convert(swapper("exported", 64, width=32)).eval()
    example = tuple(torch.from_numpy(value) for value in crops(0).values())
    stop, exports, errors = threading.Event(), [0], []

    def exporting() -> None:
        try:
            while not stop.is_set():
                export(exported, example, [True, True], strict=True)
                exports[0] += 1
        except Exception as error:  # the failure this test exists for, reported below
            errors.append(error)

    thread = threading.Thread(target=exporting, daemon=True)
    thread.start()
    try:
        for seed in range(3):
            engine = TorchEngine(convert(swapper("compiled", 64, width=4, seed=seed)), mode="default", max_batch=4)
            engine.run(crops(seed))
            assert engine.stats.compiles == 1 and engine.stats.fallback_reason is None, engine.stats
    finally:
        stop.set()
        thread.join()
    assert not errors and exports[0] >= 1, errors
