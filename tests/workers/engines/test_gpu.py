"""On a GPU host: the detectors' batched suppression on the GPU agrees with the CPU, an out-of-memory batch on the real
device is halved and retried without losing an item, and a second process reuses the compile cache. Skipped, with the
reason in the summary (``-ra``), where torch sees no CUDA or ROCm device."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from workers.engines.batching import FittedBatches
from workers.engines.memory import TorchDeviceMemory
from workers.faces.batched_decoding import suppress

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason=f"no GPU: torch {torch.__version__} sees no CUDA or ROCm device",
    ),
]


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def test_suppression_on_the_gpu_equals_the_cpu() -> None:
    generator = torch.Generator().manual_seed(0)
    boxes = torch.rand(4, 50, 2, generator=generator) * 300
    boxes = torch.cat([boxes, boxes + 40], dim=2)
    scores = torch.rand(4, 50, generator=generator)
    assert torch.equal(suppress(boxes.cuda(), scores.cuda(), 0.5, 0.3).cpu(), suppress(boxes, scores, 0.5, 0.3))


def test_an_out_of_memory_batch_on_the_device_is_halved_and_no_item_is_lost() -> None:
    memory = TorchDeviceMemory()
    per_item = memory.free_bytes() // 3  # 8 or 4 items at once cannot fit; 2 can
    batches = FittedBatches(8, memory=memory)

    def step(items: np.ndarray) -> np.ndarray:
        held = torch.empty(len(items) * per_item, dtype=torch.uint8, device="cuda")
        del held
        return items * 2

    items = np.arange(8)
    assert batches.map(items, step).tolist() == (items * 2).tolist()
    assert batches.backoffs >= 1 and batches.cap <= 2


def test_a_second_process_compiles_from_the_cache(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        import numpy as np, torch
        from torch._dynamo.utils import counters
        from tests.support import replicas
        from workers.engines.onnx_to_torch import convert
        from workers.engines.torch_engine import TorchEngine, use_compile_cache
        use_compile_cache(Path(sys.argv[1]))
        engine = TorchEngine(convert(replicas.inswapper_128()), device="cuda", mode="default", max_batch=4)
        engine.run({"target": np.zeros((4, 3, 128, 128), np.float32), "source": np.zeros((4, 512), np.float32)})
        print(json.dumps(dict(counters["inductor"])))
        """
    )
    runs = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "cache")], capture_output=True, text=True, cwd=ROOT,
            timeout=600, check=True,
        )  # fmt: skip
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert runs[0].get("fxgraph_cache_miss", 0) > 0
    assert runs[1].get("fxgraph_cache_hit", 0) > 0 and runs[1].get("fxgraph_cache_miss", 0) == 0
