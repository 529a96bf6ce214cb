"""One run of a llama.cpp tool as a child in its own process group: its output to a log and to a line callback, a
cancel through the TaskState, and its peak memory (the child's maximum resident set, from wait4)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.installs.child_output import output_lines, stop_group
from app.task import Stopped, TaskState

STOP_GRACE_S = 3.0
TAIL_LINES = 12


class ToolError(Exception):
    """A tool failed; the message holds what it said last and where its whole output is."""


@dataclass(frozen=True)
class ToolRun:
    """A finished run: its output, wall time and peak resident memory (None where the OS does not say)."""

    output: list[str]
    seconds: float
    peak_rss_bytes: int | None


def _wait(process: subprocess.Popen[str]) -> int | None:
    """Reap the child and return its peak resident memory in bytes."""
    if not hasattr(os, "wait4"):
        process.wait()
        return None
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux, in bytes on macOS
    return int(usage.ru_maxrss) * (1 if sys.platform == "darwin" else 1024)


def run_tool(
    argv: Sequence[str], log_path: Path, state: TaskState, on_line: Callable[[str], None] | None = None
) -> ToolRun:
    """Run `argv` to its end; ToolError when it fails, Stopped (its process group killed) when the state asks."""
    started = time.monotonic()
    process = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        errors="replace", start_new_session=True,
    )  # fmt: skip
    output: list[str] = []
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with log_path.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(argv)}\n")
        try:
            for line in output_lines(process, state.check):
                log.write(line)
                output.append(line.rstrip("\n"))
                tail.append(line.rstrip())
                if on_line is not None:
                    on_line(line)
        except Stopped:
            stop_group(process, STOP_GRACE_S)
            raise
    peak = _wait(process)
    if process.returncode != 0:
        said = [ln for ln in tail if "error" in ln.lower() or "failed" in ln.lower()] or list(tail)[-6:]
        raise ToolError(f"{Path(argv[0]).name} failed (exit {process.returncode}):\n" + "\n".join(said) +
                        f"\nFull log: {log_path}")  # fmt: skip
    return ToolRun(output, time.monotonic() - started, peak)


__all__ = ["ToolError", "ToolRun", "run_tool"]
