"""Child processes that read users' files (ffmpeg, ffprobe): the one place they start, what they may see, and
how their stderr is read.

* :func:`start`, :func:`run`, :func:`capture`: the only functions of the farm that start a process, and the only
  programs they start are :data:`FFMPEG` and :data:`FFPROBE` (``tests/test_modules.py`` walks the source and fails
  when another module starts one). They are here, not among the workers' video modules (``workers.video``),
  because the API probes uploads with ffprobe too (``shared.media``), and the API never imports worker code.
* :func:`child_env`: a child gets a minimal environment — what it needs to find its binaries and libraries and
  to reach the GPU — never the process's own settings (database URL, broker password, S3 secret …).
* :class:`StderrTail`: a thread drains a child's stderr as it comes, keeping only its last bytes. A decoder fed a
  corrupt stream can write megabytes of errors; unread, the pipe fills and the child blocks — and with it the
  reader of its stdout. Drained this way, memory stays bounded and the child never waits on its stderr.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
from collections import deque
from collections.abc import Mapping
from typing import IO

from shared.errors import FfmpegError, FfmpegMissingError

__all__ = ["CHILD_ENV_NAMES", "FFMPEG", "FFPROBE", "StderrTail", "capture", "child_env", "run", "start"]

logger = logging.getLogger(__name__)

FFMPEG = "ffmpeg"
FFPROBE = "ffprobe"
PROGRAMS = frozenset({FFMPEG, FFPROBE})
"""The programs the farm starts: nothing else is ever run."""

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


def _checked(args: list[str]) -> list[str]:
    if not args or args[0] not in PROGRAMS:
        raise ValueError(f"the farm starts only {sorted(PROGRAMS)}, not {args[:1]}")
    return args


def start(
    args: list[str], *, name: str, stdin: bool = False, stdout: bool = False
) -> tuple[subprocess.Popen[bytes], StderrTail]:
    """Start ``args`` (an ffmpeg or ffprobe command line, never a shell string): the one way a long-running child
    starts. It gets the minimal environment of a child (:func:`child_env`), pipes for stdin and stdout where asked
    (else nothing to read and nowhere to write), and its stderr drained as it comes into a bounded tail (thread
    ``name``).

    Raises:
        FfmpegError: ``ffmpeg_missing``: the program is not installed.
    """
    logger.debug("running %s", args)
    try:
        proc = subprocess.Popen(
            _checked(args),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=child_env(),
        )
    except FileNotFoundError as exc:
        raise FfmpegMissingError(f"{args[0]} is not installed") from exc
    assert proc.stderr is not None
    return proc, StderrTail(proc.stderr, name=name)


def run(args: list[str], *, what: str, timeout: float | None = None) -> None:
    """Run a command that writes files (:func:`start`) to completion.

    Raises:
        FfmpegError: the program is missing, timed out or exited non-zero; the message keeps stderr's tail.
    """
    proc, stderr = start(args, name=f"{args[0]}-stderr")
    assert proc.stderr is not None
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.wait()
        raise FfmpegError(f"{what}: {args[0]} timed out") from exc
    finally:
        stderr.join()
        proc.stderr.close()
    if code != 0:
        raise FfmpegError(f"{what}: {args[0]} exited with {code}", stderr=stderr.text())


def capture(args: list[str], *, timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run a command whose output is the answer (a probe, a listing) and return it, stdout and stderr captured
    whole: for short outputs only (long ones go through :func:`start`, whose stderr is bounded).

    Raises:
        FfmpegError: ``ffmpeg_missing``: the program is not installed.
        subprocess.TimeoutExpired: it ran past ``timeout`` seconds (it was killed).
    """
    logger.debug("running %s", args)
    try:
        return subprocess.run(
            _checked(args), stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, env=child_env(), check=False
        )
    except FileNotFoundError as exc:
        raise FfmpegMissingError(f"{args[0]} is not installed") from exc
