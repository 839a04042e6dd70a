"""Child processes: a minimal environment, and a stderr drained as it comes into a bounded buffer."""

from __future__ import annotations

import subprocess
import sys

from shared.processes import StderrTail, child_env


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
