"""A gate at a process boundary the farm owns (the ``ffmpeg`` first on a worker's PATH, as ``tests.support.faults``):
the encode of one chunk waits, after saying so, until the test opens the gate. A test knows exactly which chunk is
rendering when it acts, with no fixed sleep. No code of the farm knows about it.

A gate made with ``job_only`` holds nothing until the test arms it for one job (:meth:`Gate.arm`): a worker that
outlives many tests (one per module) renders every other job's chunks as usual.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

# The chunk's encode is written to <scratch>/<job id>/<temporary folder>/<index>.mp4 (workers.rendering).
_SCRIPT = """#!/bin/sh
hold() {{
  touch '{reached}'
  while [ ! -e '{opened}' ]; do sleep 0.05; done
}}
if [ -e '{armed}' ]; then
  job=$(cat '{armed}')
  for arg in "$@"; do
    if [ -z "$job" ]; then
      case "$arg" in */{name}) hold;; esac
    else
      case "$arg" in */"$job"/*/{name}) hold;; esac
    fi
  done
fi
exec '{ffmpeg}' "$@"
"""


@dataclass(frozen=True)
class Gate:
    reached: Path  # exists once the chunk's encode started and waits
    opened: Path  # create it to let the encode go on
    armed: Path  # holds the job the gate waits for ("": any job); absent: the gate holds nothing
    env: dict[str, str]  # the worker's environment

    def open(self) -> None:
        self.opened.touch()

    def arm(self, job_id: str) -> None:
        """Hold ``job_id``'s chunk from now on (and no other job's)."""
        self.armed.write_text(job_id)


def gated_encoder(folder: Path, chunk_index: int, *, job_only: bool = False) -> Gate:
    """A worker environment whose encode of chunk ``chunk_index`` waits for the gate to open: any job's, or with
    ``job_only`` the job the gate is armed for."""
    real = shutil.which("ffmpeg")
    assert real is not None, "ffmpeg is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    reached, opened, armed = folder / "reached", folder / "opened", folder / "armed"
    if not job_only:
        armed.write_text("")
    script = folder / "ffmpeg"
    name = f"{chunk_index:05d}.mp4"
    script.write_text(_SCRIPT.format(name=name, reached=reached, opened=opened, armed=armed, ffmpeg=real))
    script.chmod(0o755)
    return Gate(reached, opened, armed, {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"})
