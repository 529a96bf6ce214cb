"""Running a benchmark's load on an event loop of its own, with Ctrl-C said once.

The signal's KeyboardInterrupt is raised in whatever callback runs when it comes, often a task of aiohttp's (the
one writing a request body). asyncio raises it out of the loop, and the task keeps it as an exception nobody
retrieves, which asyncio then logs, traceback and all, on the command's stderr after the command's own message."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_load(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, with an interrupt inside one of its tasks raised, not logged as well."""
    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(_not_the_interrupt)
        return runner.run(main)


def _not_the_interrupt(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if not isinstance(context.get("exception"), KeyboardInterrupt):  # that one is raised out of run_load
        loop.default_exception_handler(context)
