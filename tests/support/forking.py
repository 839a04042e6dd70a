"""Run a call in a forked child and read what it answers: for code that keeps thread pools, which a process forked
after its parent used them (a prefork worker, a fork-started test farm) must make anew."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable


def answer_of_forked_child(call: Callable[[], str], deadline: float = 60.0) -> str:
    """What ``call()`` returns in a child forked now, or ``""`` where the child hangs past ``deadline`` seconds (a
    deadline for a hang, not a speed: the child is killed) or dies before it answers."""
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.close(reader)
        os.write(writer, call().encode())
        os._exit(0)
    os.close(writer)
    ready, _, _ = select.select([reader], [], [], deadline)
    if not ready:
        os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    answer = os.read(reader, 4096).decode() if ready else ""
    os.close(reader)
    return answer
