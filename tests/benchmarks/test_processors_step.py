"""The six processors' step of ``benchmarks/device_run.sh``: its arguments, as bash reads them from the script, parse
and run here on the CPU at a tiny size (the step runs them with ``--device cuda`` on a lent GPU) and print each of the
six processors' ms per frame batched and one at a time; without a GPU, ``--device cuda`` refuses in one line rather
than passing CPU figures off as GPU ones."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_run.sh"
TINY = ["--frames", "2", "--batch", "2", "--crop-frames", "2", "--repeats", "1"]  # after the script's: they win
SIX = {"frame_colorizer", "expression_restorer", "face_editor", "age_modifier", "deep_swapper", "background_remover"}


def step_arguments() -> list[str]:
    """The step's ``processors=(...)`` array, as bash reads it from the script."""
    read = f'eval "$(sed -n \'/^processors=(/,/)$/p\' {SCRIPT})" && printf "%s\\n" "${{processors[@]}}"'
    done = subprocess.run(["bash", "-c", read], capture_output=True, text=True, check=True, timeout=30)
    return done.stdout.splitlines()


def test_the_step_runs_its_arguments_with_the_models_on_the_gpu() -> None:
    assert step_arguments()[:2] == ["-m", "benchmarks.processors"]
    assert '"$python" "${processors[@]}" --device cuda\n' in SCRIPT.read_text()


@pytest.mark.slow
def test_the_steps_arguments_run_on_the_cpu_and_give_each_processor_batched_against_one_at_a_time() -> None:
    done = subprocess.run(
        [sys.executable, *step_arguments(), "--device", "cpu", *TINY],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    measured = {}
    for index, line in enumerate(lines):
        if line.startswith(" "):
            continue
        batched, single = lines[index + 1 : index + 3]
        assert re.match(r"  batched \(2 (frames )?a call\): \d+\.\d ms/frame", batched), batched
        assert re.match(r"  one at a time: +\d+\.\d ms/frame", single), single
        measured[line.split(",")[0].split()[0]] = line
    assert set(measured) == SIX, done.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the step would run")
def test_without_a_gpu_the_steps_command_refuses_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, *step_arguments(), "--device", "cuda"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["processors: --device cuda, but torch sees no CUDA device"]
