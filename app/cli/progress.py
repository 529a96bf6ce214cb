"""The one progress line of long commands (pull, engine build, vLLM install): a bar redrawn in place on a
terminal; on a pipe or in a log file, a plain line every few seconds and at each new step instead."""

from __future__ import annotations

import sys
import time
from typing import Literal, TextIO

from app.task import Progress

Unit = Literal["bytes", "percent"]
PIPE_INTERVAL_S = 5.0


class ProgressBar:
    """Renders `Progress` events. `unit` says what `done` and `total` count: bytes (shown in MB with the rate and
    the time left) or percent (shown with what is being worked on). Without a total only the step is shown."""

    def __init__(self, out: TextIO | None = None, width: int = 30, unit: Unit = "bytes") -> None:
        self._out = out if out is not None else sys.stderr
        self._width = width
        self._unit = unit
        self._tty = self._out.isatty()
        self._last_line = float("-inf")
        self._last_step = ""

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        new_step = progress.current != self._last_step
        if not self._tty and not (progress.finished or new_step) and now - self._last_line < PIPE_INTERVAL_S:
            return
        self._last_line, self._last_step = now, progress.current
        line = self.line(progress)
        end = "\n" if progress.finished or not self._tty else ""
        self._out.write(("\r" if self._tty else "") + line.ljust(80 if self._tty else 0) + end)
        self._out.flush()

    def line(self, progress: Progress) -> str:
        if progress.phase == "verify" and progress.check_total:
            fraction = progress.checked / progress.check_total
            return f"{self._bar(fraction, '=')} {fraction * 100:5.1f}% verifying {progress.current.rsplit('/', 1)[-1]}"
        if not progress.total:
            return progress.current
        fraction = min(1.0, progress.done / progress.total)
        if self._unit == "percent":
            return f"{self._bar(fraction)} {fraction * 100:5.1f}% {progress.current}"
        rate = f"{progress.rate_bps / 1e6:6.1f} MB/s" if progress.rate_bps else "    -- MB/s"
        return (
            f"{self._bar(fraction)} {fraction * 100:5.1f}% {progress.done / 1e6:,.1f}/{progress.total / 1e6:,.1f} MB "
            f"{rate} ETA {duration(progress.eta_s)}"
        )

    def _bar(self, fraction: float, fill: str = "#") -> str:
        filled = int(fraction * self._width)
        return f"[{fill * filled}{'-' * (self._width - filled)}]"


def duration(seconds: float | None) -> str:
    """`04:05`, or `1:02:03` past an hour; `--:--` when unknown."""
    if seconds is None:
        return "--:--"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02}:{secs:02}" if hours else f"{minutes:02}:{secs:02}"
