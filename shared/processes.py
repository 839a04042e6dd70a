"""Child processes that read users' files (ffmpeg, ffprobe): what they may see, and how their stderr is read.

* :func:`child_env`: a child gets a minimal environment — what it needs to find its binaries and libraries and
  to reach the GPU — never the process's own settings (database URL, broker password, S3 secret …).
* :class:`StderrTail`: a thread drains a child's stderr as it comes, keeping only its last bytes. A decoder fed a
  corrupt stream can write megabytes of errors; unread, the pipe fills and the child blocks — and with it the
  reader of its stdout. Drained this way, memory stays bounded and the child never waits on its stderr.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Mapping
from typing import IO

__all__ = ["CHILD_ENV_NAMES", "StderrTail", "child_env"]

# Variables a child keeps: the search paths, the locale and time zone, a temporary folder, and the variables that
# select and expose GPUs (NVENC/NVDEC need the driver's libraries on LD_LIBRARY_PATH in the CUDA images).
CHILD_ENV_NAMES = frozenset(
    {
        "PATH",
        "LD_LIBRARY_PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "TZ",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    }
)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: only :data:`CHILD_ENV_NAMES` of ``environ`` (default: this process's).

    >>> child_env({"PATH": "/usr/bin", "SWAPFARM_DATABASE_URL": "postgresql://u:p@db/x", "AWS_SECRET_ACCESS_KEY": "s"})
    {'PATH': '/usr/bin'}
    """
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if name in CHILD_ENV_NAMES}


class StderrTail:
    """Drain ``stream`` on a daemon thread into a buffer that keeps its last ``limit`` bytes; the stream is
    closed when it ends.

    ``total`` counts every byte read. :meth:`text` waits for the end of the stream (at most ``timeout`` seconds)
    and returns the tail.
    """

    def __init__(self, stream: IO[bytes], *, limit: int = 64 * 1024, name: str = "stderr-drain") -> None:
        self._stream, self._limit = stream, limit
        self._blocks: deque[bytes] = deque()
        self._kept = 0
        self.total = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name=name, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        try:
            while block := self._stream.read1(65536) if hasattr(self._stream, "read1") else self._stream.read(65536):
                with self._lock:
                    self.total += len(block)
                    self._blocks.append(block)
                    self._kept += len(block)
                    while self._kept - len(self._blocks[0]) >= self._limit:
                        self._kept -= len(self._blocks.popleft())
        except (OSError, ValueError):  # the stream was closed under us: the child is gone
            pass
        finally:
            try:
                self._stream.close()
            except (OSError, ValueError):
                pass

    def join(self, timeout: float | None = 10.0) -> None:
        self._thread.join(timeout)

    def text(self, timeout: float | None = 10.0) -> str:
        """The last ``limit`` bytes of the stream, decoded (after it ended, or after ``timeout``)."""
        self.join(timeout)
        with self._lock:
            data = b"".join(self._blocks)
        return data[-self._limit :].decode(errors="replace")
