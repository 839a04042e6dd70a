"""``benchmarks/gpu_check.py`` is honest: without a GPU it refuses (exit 2, one line why) rather than passing CPU
figures off as GPU ones; ``--cpu-smoke`` runs its code paths on tiny models and labels the result as such."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.support.media import make_clip

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the check would run")
def test_without_a_gpu_the_check_refuses_with_one_line_why() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no GPU") and "--cpu-smoke" in lines[0]


@pytest.mark.slow
def test_the_cpu_smoke_measures_each_part_and_the_jobs_it_checked_succeeded(data_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "models").mkdir(parents=True)
    (data / "media").mkdir()
    (data / "models" / "yunet_2023mar.onnx").symlink_to(data_dir / "models" / "yunet_2023mar.onnx")
    (data / "media" / "s0.jpg").symlink_to(data_dir / "media" / "s0.jpg")
    make_clip(data / "media" / "tiny.mp4", seconds=0.5, size="160x120", audio=False)
    args = ["--cpu-smoke", "--modes", "eager", "--buckets", "1", "--stage-frames", "2", "--seconds-per-point", "0.05"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--data", str(data), "--clip", "tiny.mp4"],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    table = done.stdout
    assert "CPU (--cpu-smoke: not a GPU figure)" in table
    rows = [line.split() for line in table.splitlines()]
    kinds = {(row[0], row[1]) for row in rows if row}
    assert {("throughput", "inswapper_128"), ("stage", "decode"), ("stage", "swap"), ("stage", "encode")} <= kinds
    assert "onnxruntime CPU" in table and "torch eager fp32" in table
    e2e = [line for line in table.splitlines() if line.startswith("e2e")]
    assert len(e2e) == 1 and "frames/s" in e2e[0] and "15 frames in" in e2e[0], table
