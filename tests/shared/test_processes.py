"""Child processes: started in one place, ffmpeg and ffprobe only, with a minimal environment, and a stderr
drained as it comes into a bounded buffer."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from shared.errors import FfmpegError
from shared.processes import FFMPEG, StderrTail, capture, child_env, run
from tests.support.source import SourceFile, source_files

# The one module that may start a process: ffmpeg and ffprobe run from there, with the child environment.
LAUNCHER = "shared.processes"
# Calls that start a process, by module: ``subprocess.run(...)``, ``os.system(...)``, or the bare name imported.
_STARTERS = {
    "subprocess": {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"},
    "os": {"system", "popen", "spawnl", "spawnlp", "spawnv", "spawnvp", "execv", "execvp", "execve", "posix_spawn",
           "posix_spawnp", "fork", "forkpty"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn"},
    "multiprocessing": {"Process"},
}  # fmt: skip


def process_starts(source: SourceFile) -> list[str]:
    """Where ``source`` starts a process (``module.function(...)``, or a function imported by name)."""
    imported = {
        alias.asname or alias.name: (node.module, alias.name)
        for node in ast.walk(source.tree)
        if isinstance(node, ast.ImportFrom) and node.module in _STARTERS
        for alias in node.names
    }
    found = []
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module, name = func.value.id, func.attr
        elif isinstance(func, ast.Name) and func.id in imported:
            module, name = imported[func.id]
        else:
            continue
        if name in _STARTERS.get(module, ()):
            found.append(f"{source.name}:{node.lineno} {module}.{name}")
    return found


def test_only_the_launcher_starts_a_process() -> None:
    starts = {source.module: process_starts(source) for source in source_files(("api", "shared", "workers", "cli"))}
    assert starts[LAUNCHER], "the walk finds the launcher's own starts"
    stray = [where for module, found in starts.items() if module != LAUNCHER for where in found]
    assert not stray, f"processes started outside {LAUNCHER} (ffmpeg/ffprobe run through it): {stray}"


def test_the_walk_finds_a_process_started_by_a_bare_name() -> None:
    tree = ast.parse("from subprocess import Popen as P\nimport os\nP(['ffmpeg'])\nos.system('ffprobe x')")
    assert process_starts(SourceFile(Path("workers/x.py"), "workers.x", tree)) == [
        "workers/x.py:3 subprocess.Popen",
        "workers/x.py:4 os.system",
    ]


def test_the_launcher_starts_ffmpeg_and_ffprobe_and_nothing_else() -> None:
    with pytest.raises(ValueError, match="starts only"):
        capture([sys.executable, "-c", "print(1)"], timeout=10)
    with pytest.raises(ValueError, match="starts only"):
        run(["sh", "-c", "true"], what="a shell")
    assert b"ffmpeg version" in capture([FFMPEG, "-version"], timeout=30).stdout


def test_a_missing_ffmpeg_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FfmpegError) as missing:
        capture([FFMPEG, "-version"], timeout=10)
    assert missing.value.code == "ffmpeg_missing"


def test_a_child_sees_no_setting_or_credential() -> None:
    parent = {
        "PATH": "/usr/bin",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        "CUDA_VISIBLE_DEVICES": "1",
        "SWAPFARM_DATABASE_URL": "postgresql+psycopg://swapfarm:pw@db/swapfarm",
        "SWAPFARM_BROKER_URL": "redis://:pw@redis:6379/0",
        "SWAPFARM_S3_SECRET": "s3-secret",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "PGPASSWORD": "pw",
    }
    assert child_env(parent) == {
        "PATH": "/usr/bin",
        "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        "CUDA_VISIBLE_DEVICES": "1",
    }


def test_a_child_flooding_its_stderr_is_never_blocked_and_only_the_tail_is_kept() -> None:
    # 8 MiB of errors, far past a pipe's buffer: unread, the child would block on its first 64 KiB.
    flood = "import sys\nfor i in range(131072): sys.stderr.write(f'{i:08d} ' + 'e' * 54 + '\\n')\nprint('done')"
    proc = subprocess.Popen([sys.executable, "-c", flood], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None and proc.stdout is not None
    tail = StderrTail(proc.stderr, limit=4096)
    with proc.stdout:
        assert proc.stdout.read() == b"done\n"  # the child ran to its end while we read only its stdout
    assert proc.wait(timeout=60) == 0
    text = tail.text()
    assert tail.total == 131072 * 64
    assert len(text) <= 4096 + 64 and text.endswith(f"{131071:08d} " + "e" * 54 + "\n")
