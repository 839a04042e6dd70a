"""Faults injected at a process boundary the farm owns: the ``ffmpeg`` a worker runs is the first one on its PATH.

:func:`failing_encoder` puts a stand-in first on a worker's PATH. While its switch file exists, it fails the encode
of one chunk (the encoder's output file names the chunk: ``<index>.mp4``), as a broken encoder build or a bad
frame would; every other call, and every call once the switch is removed, runs the real ffmpeg. No code of the
farm knows about it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

_SCRIPT = """#!/bin/sh
if [ -e '{switch}' ]; then
  for arg in "$@"; do
    case "$arg" in
      */{name}) echo "injected fault: the encoder crashed writing $arg" >&2; exit 1;;
    esac
  done
fi
exec '{real}' "$@"
"""


def _first_on_path(folder: Path, tool: str, script: str, **fields: object) -> dict[str, str]:
    """The environment for a worker whose ``tool`` is ``script`` (``{real}``: the real tool's path, then ``fields``),
    written to ``folder`` and put first on its PATH."""
    real = shutil.which(tool)
    assert real is not None, f"{tool} is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    stand_in = folder / tool
    stand_in.write_text(script.format(real=real, **fields))
    stand_in.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def failing_encoder(folder: Path, chunk_index: int, switch: Path) -> dict[str, str]:
    """The environment for a worker whose encodes of chunk ``chunk_index`` fail while ``switch`` exists."""
    env = _first_on_path(folder, "ffmpeg", _SCRIPT, switch=switch, name=f"{chunk_index:05d}.mp4")
    switch.touch()
    return env


_SLOW = """#!/bin/sh
sleep {seconds}
exec '{real}' "$@"
"""


def slow_tool(folder: Path, tool: str, seconds: float) -> dict[str, str]:
    """The environment for a worker whose ``tool`` (``ffprobe``, ``ffmpeg``) takes ``seconds`` longer every call, as
    on a long video or a busy disk."""
    return _first_on_path(folder, tool, _SLOW, seconds=seconds)


_BROKEN = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    */[0-9][0-9][0-9][0-9][0-9].mp4) echo "injected fault: this machine's encoder is broken ($arg)" >&2; exit 1;;
  esac
done
exec '{real}' "$@"
"""


_SLOW_CHUNKS = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    */selftest-*) break;;
    */[0-9][0-9][0-9][0-9][0-9].*) sleep {seconds}; break;;
  esac
done
exec '{real}' "$@"
"""


def slow_chunks(folder: Path, seconds: float) -> dict[str, str]:
    """The environment for a worker whose chunk encodes start ``seconds`` late: a tiny chunk then lasts long enough
    for a kill, an outage or a duplicate message to land in it, with no CPU spent. The encoder's output file names
    a chunk (``<index>.<container>``); every other ffmpeg call (the codec probe and self-test as the worker starts,
    planning's frame scan, the stitch) runs at once, so the wait is only where the test needs it."""
    return _first_on_path(folder, "ffmpeg", _SLOW_CHUNKS, seconds=seconds)


def broken_renders(folder: Path) -> dict[str, str]:
    """The environment for a worker whose every chunk encode fails (a broken encoder build, a bad GPU): the
    encoder's output file names a chunk (``<index>.mp4``), as the worker's self-test's does; every other ffmpeg
    call (planning's frame scan, the stitch) runs the real ffmpeg."""
    return _first_on_path(folder, "ffmpeg", _BROKEN)
