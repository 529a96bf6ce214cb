"""Waiting for a condition, instead of sleeping a fixed time and hoping it holds by then: for states that announce no
event a test could wait on (another process's state, a file growing, a listing changing)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, every_s: float = 0.2) -> Any:
    """The first true value `check` returns, polled every `every_s` until `timeout_s` has passed (then the test fails,
    naming `what`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(every_s)


async def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0, every_s: float = 0.01) -> None:
    """Poll `condition` on the loop until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        await asyncio.sleep(every_s)
