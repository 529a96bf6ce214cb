"""How long the GUI event loop stays blocked: a timer asks to fire every few milliseconds, and the longest gap
between two firings is the longest time the GUI thread was busy with something else.

    with BlockMeter() as meter:
        qtbot.waitUntil(...)          # whatever the GUI does meanwhile
    print(f"longest block: {meter.longest_ms:.0f} ms")

The figure includes the timer's own lateness (a few ms on an idle machine, more on a loaded one), so a bound
on it must be generous; it measures the GUI thread only while the event loop runs (inside `qtbot.wait*`).
`longest_busy_ms` is the GUI thread's own CPU time within one gap: the work that kept the loop from turning,
without the time a busy machine gave the CPU to other processes.
"""

from __future__ import annotations

import time
from types import TracebackType

from PySide6.QtCore import QObject, Qt, QTimer, Slot

INTERVAL_MS = 10


class BlockMeter(QObject):
    """Records the longest interval between firings of a 10 ms precise timer on the GUI thread."""

    def __init__(self, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__()
        self._timer = QTimer(self)
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._last: float | None = None
        self._last_cpu = 0.0
        self.longest_ms = 0.0
        self.longest_busy_ms = 0.0
        self.ticks = 0

    def start(self) -> None:
        self._last = time.perf_counter()
        self._last_cpu = time.thread_time()
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()
        self._on_timer_timeout()  # a block at the very end counts too

    @Slot()
    def _on_timer_timeout(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if self._last is not None:
            self.longest_ms = max(self.longest_ms, (now - self._last) * 1000)
            self.longest_busy_ms = max(self.longest_busy_ms, (cpu - self._last_cpu) * 1000)
        self._last, self._last_cpu = now, cpu
        self.ticks += 1

    def __enter__(self) -> BlockMeter:
        self.start()
        return self

    def __exit__(
        self, _type: type[BaseException] | None, _value: BaseException | None, _traceback: TracebackType | None
    ) -> None:
        self.stop()
