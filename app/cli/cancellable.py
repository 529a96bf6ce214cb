"""Long CLI work (a build, a quality run) on a thread, so that Ctrl-C in the terminal cancels it through its
TaskState (the tools it started are stopped, their scratch files removed) instead of orphaning it."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TypeVar

from app.task import TaskState

T = TypeVar("T")


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def run_cancellable(work: Callable[[], T], state: TaskState, name: str, *, sigterm_cancels: bool = False) -> T:
    """`work()` on a thread named `name`; Ctrl-C (and SIGTERM with `sigterm_cancels`, as the service sends when it
    cancels a child) cancels `state` and waits for the work to end. What the work raises is raised here."""
    if sigterm_cancels and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    outcome: list[T | BaseException] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed over to the main thread, which raises it
            outcome.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=target, name=name)
    worker.start()
    # Waited for on an event, not with Thread.join: a KeyboardInterrupt inside join() can leave the thread marked
    # as stopped while it runs (CPython 3.11), and the process then exited with the compiler still at work.
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        state.cancel()
        done.wait()
    worker.join()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


__all__ = ["run_cancellable"]
