"""A long-running child (a compiler, pip) in its own process group: its output line by line, read on a thread so
that a child printing nothing for minutes never delays a cancel, and the whole group stopped on request."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator

POLL_S = 0.2  # how soon a cancel is noticed while the child is silent


def output_lines(process: subprocess.Popen[str], check: Callable[[], None]) -> Iterator[str]:
    """Each line `process` writes to its stdout, until it closes it. `check` runs between lines and at least every
    POLL_S; whatever it raises ends the iteration (the caller then stops the process)."""
    assert process.stdout is not None
    stdout = process.stdout
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        with stdout:
            for line in stdout:
                lines.put(line)
        lines.put(None)

    # Not joined: after a stop the reader ends by itself once the killed group's end of the pipe closes.
    threading.Thread(target=pump, daemon=True).start()
    while True:
        check()
        try:
            line = lines.get(timeout=POLL_S)
        except queue.Empty:
            continue
        if line is None:
            return
        yield line


def stop_group(process: subprocess.Popen[str], grace_s: float = 0.0) -> None:
    """Stop `process` and everything it started (it leads its own process group): with a grace period, TERM first
    and KILL whatever is left after it; without, KILL at once. On Windows, the process alone."""
    if os.name == "nt":
        process.kill()
        process.wait()
        return
    if grace_s > 0:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
