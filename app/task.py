"""The progress-and-cancel token a long job takes (Orange3's TaskState pattern): testable with no threads.

The job calls `check()` between steps and `advance()` as bytes arrive; whoever runs it (CLI, service, test) calls
`pause()` or `cancel()` from anywhere and receives throttled `Progress` events through `on_progress`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

RATE_WINDOW_S = 5.0

Stop = Literal["pause", "cancel"]
Phase = Literal["download", "verify"]


@dataclass(frozen=True)
class Progress:
    """Bytes done of the whole job, its total, the recent rate and the time left at that rate (None: unknown)."""

    done: int
    total: int
    rate_bps: float | None
    eta_s: float | None
    current: str  # what is being worked on, for display
    finished: bool = False
    phase: Phase = "download"
    checked: int = 0  # while verifying: bytes of `current` hashed so far, of `check_total`
    check_total: int = 0
    placed: tuple[str, ...] = ()  # the files the job has put where they stay, by its own names for them
    made_folder: bool = False  # the job made the folder those files are in (a model's own subfolder)


class Stopped(Exception):
    """The job stopped because it was asked to: `reason` is "pause" (keep the partial) or "cancel" (drop it)."""

    def __init__(self, reason: Stop) -> None:
        super().__init__("paused: run it again to resume" if reason == "pause" else "cancelled")
        self.reason = reason


class TaskState:
    """Shared between a job and its owner. Progress events come at most every `interval_s`, plus the last one.
    `placed` and `made_folder`: what earlier runs of the same job put where it stays, and still the job's."""

    def __init__(
        self,
        on_progress: Callable[[Progress], None] | None = None,
        *,
        interval_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
        placed: Iterable[str] = (),
        made_folder: bool = False,
    ) -> None:
        self._on_progress = on_progress
        self._interval_s = interval_s
        self._clock = clock
        self._stop: Stop | None = None
        self._wake = threading.Event()
        self._done = 0
        self._total = 0
        self._current = ""
        self._phase: Phase = "download"
        self._checked = 0
        self._check_total = 0
        self._last_report = float("-inf")
        self._samples: deque[tuple[float, int]] = deque()
        self._placed = sorted(placed)
        self._made_folder = made_folder

    def pause(self) -> None:
        self._stop = "pause"
        self._wake.set()

    def cancel(self) -> None:
        self._stop = "cancel"
        self._wake.set()

    @property
    def stop_requested(self) -> Stop | None:
        return self._stop

    def check(self) -> None:
        """Raise Stopped when the owner asked the job to stop."""
        if self._stop is not None:
            raise Stopped(self._stop)

    def wait(self, seconds: float) -> None:
        """Sleep for a backoff, woken at once by pause or cancel."""
        self._wake.wait(seconds)
        self.check()

    def begin(self, total: int, done: int = 0) -> None:
        self._total, self._done = total, done
        self._samples.clear()
        self._samples.append((self._clock(), done))

    def working_on(self, current: str) -> None:
        self._current = current
        self._phase, self._checked, self._check_total = "download", 0, 0

    def verifying(self, current: str, checked: int, total: int) -> None:
        """Report hashing progress: a multi-gigabyte file takes a while to check, and the bar must not look stuck."""
        self._current, self._phase, self._checked, self._check_total = current, "verify", checked, total
        now = self._clock()
        if now - self._last_report >= self._interval_s or checked == 0:
            self._report(now, finished=False)

    @property
    def placed(self) -> tuple[str, ...]:
        return tuple(self._placed)

    @property
    def made_folder(self) -> bool:
        return self._made_folder

    def record_placed(self, name: str) -> None:
        """The job put a file where it stays: reported at once, as the owner takes it back if the job is cancelled."""
        if name not in self._placed:
            self._placed.append(name)
        self._report(self._clock(), finished=False)

    def record_made_folder(self) -> None:
        """The job made the folder its files go in: the owner removes it with them, once it is empty."""
        self._made_folder = True
        self._report(self._clock(), finished=False)

    def record_taken_back(self) -> None:
        """The job deleted all it placed, and its folder: none of it is the job's any more (the names may soon be
        another's)."""
        self._placed.clear()
        self._made_folder = False
        self._report(self._clock(), finished=False)

    def advance(self, nbytes: int) -> None:
        """Count bytes done (negative when work is thrown away) and report when the last report is old enough."""
        self._done += nbytes
        now = self._clock()
        self._samples.append((now, self._done))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        if now - self._last_report >= self._interval_s:
            self._report(now, finished=False)

    def finish(self) -> None:
        self._report(self._clock(), finished=True)

    def _report(self, now: float, finished: bool) -> None:
        self._last_report = now
        if self._on_progress is None:
            return
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        rate = (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None
        left = max(0, self._total - self._done)
        eta = 0.0 if left == 0 else (left / rate if rate else None)
        phase = "download" if finished else self._phase
        self._on_progress(
            Progress(
                self._done, self._total, rate, eta, self._current, finished, phase, self._checked, self._check_total,
                self.placed, self._made_folder,
            )
        )  # fmt: skip
