"""FIFO admission to engines that serve a limited number of requests at once."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator


class QueueFull(Exception):
    """The line for this engine is full; `retry_after_s` is a fair estimate of when to try again."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"queue full, retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class EngineQueue:
    """At most `capacity` requests run at once; up to `max_waiting` more wait, served first come, first served.

    A slot is handed straight from a finishing request to the next waiter, so no later arrival can overtake.
    """

    def __init__(self, capacity: int, max_waiting: int) -> None:
        self.capacity = capacity
        self.max_waiting = max_waiting
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._durations: deque[float] = deque(maxlen=20)

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def retry_after(self) -> int:
        typical = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(typical * (self.waiting + 1) / self.capacity))

    async def acquire(self) -> float:
        """Take a slot, waiting in line if none is free; returns the seconds spent waiting. Raises QueueFull at
        once if the line is full. Every successful acquire needs one `release(started)`."""
        if self.running < self.capacity and not self._waiters:
            self.running += 1  # the common case: no future, no clock
            return 0.0
        if len(self._waiters) >= self.max_waiting:
            raise QueueFull(self.retry_after())
        arrived = time.monotonic()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if not turn.done() or turn.cancelled():
                with contextlib.suppress(ValueError):
                    self._waiters.remove(turn)
            else:  # the slot was handed over just as the client left: pass it on
                self._release()
            raise
        return time.monotonic() - arrived

    def release(self, started: float) -> None:
        """Give the slot back; `started` is when the request got it (time.monotonic())."""
        self._durations.append(time.monotonic() - started)
        self._release()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold a slot for the block; yields the seconds spent waiting. Raises QueueFull at once if full."""
        queued_s = await self.acquire()
        started = time.monotonic()
        try:
            yield queued_s
        finally:
            self.release(started)

    def set_capacity(self, capacity: int) -> None:
        """Serve `capacity` requests at once from now on (an engine restarted with more or fewer slots). Waiters
        get the new slots at once, in order; requests beyond a lowered capacity finish undisturbed."""
        self.capacity = capacity
        while self.running < self.capacity and self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                self.running += 1
                turn.set_result(None)

    def _release(self) -> None:
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.running -= 1
