"""Ctrl-C ends a command within about two seconds, whatever it is waiting on.

Python turns SIGINT into KeyboardInterrupt in the main thread, but only once the main thread runs Python code
again: a read that the signal did not interrupt (it was delivered to another thread), a join, a lock or a C
library call can hold it for as long as its own timeout (30 s for a stalled download). So the signal is also
watched from a thread of its own, through the interpreter's wakeup file descriptor, which the C-level handler
writes to at once whichever thread took the signal: the watcher nudges the main thread with SIGINT if Python has
not seen the signal yet, and when the command has still not finished `grace_s` later, ends the process with
status 130 (after `on_force`, which must be quick). A second Ctrl-C ends it at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import psutil

GRACE_S = 1.5  # for the command's own clean-up (partial files kept, children stopped) before the process ends
NUDGE_AFTER_S = 0.2  # Python normally sees the signal at once; after this the main thread is stuck in a call
EXIT_CODE = 130  # 128 + SIGINT, as shells report an interrupted command


class _Interrupts:
    def __init__(self, grace_s: float, on_force: Callable[[], None] | None) -> None:
        self.grace_s = grace_s
        self.on_force = on_force
        self.seen_by_python = threading.Event()
        self.first_at: float | None = None
        self.echoes = 0  # SIGINTs this watcher sent itself, not the user's

    def python_handler(self, signum: int, frame: FrameType | None) -> None:
        """The Python-level handler, in the main thread: what Python does by default."""
        self.seen_by_python.set()
        raise KeyboardInterrupt

    def watch(self, wakeup: int) -> None:
        while True:
            try:
                data = os.read(wakeup, 64)
            except InterruptedError:
                continue
            if not data:
                return
            if signal.SIGINT not in data:
                continue
            if self.echoes:
                self.echoes -= 1
                continue
            if self.first_at is not None:  # a second Ctrl-C: no more waiting
                self.force()
            self.first_at = time.monotonic()
            threading.Thread(target=self.deadline, name="interrupt-deadline", daemon=True).start()

    def deadline(self) -> None:
        if not self.seen_by_python.wait(NUDGE_AFTER_S):
            self.echoes += 1
            with contextlib.suppress(OSError):  # the main thread may be gone already
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
        time.sleep(max(0.0, self.grace_s - NUDGE_AFTER_S))  # the grace itself: nothing to wait for but time
        self.force()

    def force(self) -> None:
        if self.on_force is not None:
            with contextlib.suppress(Exception):  # the process ends next whatever happens here
                self.on_force()
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write("\ninterrupted\n")
            sys.stderr.flush()
        os._exit(EXIT_CODE)


def kill_descendants() -> None:
    """SIGKILL every process this one started, and theirs (a compiler, pip): nothing outlives a forced exit."""
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()


def exit_promptly_on_interrupt(grace_s: float = GRACE_S, on_force: Callable[[], None] | None = None) -> None:
    """From now on a Ctrl-C raises KeyboardInterrupt in the main thread as usual, and ends the process `grace_s`
    later if the command has not ended by then. Call once, from the main thread; not with an asyncio loop that
    handles signals itself (it takes the wakeup descriptor over)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_kill"):
        return  # Windows: Ctrl-C is a console event there, not a signal to another thread
    interrupts = _Interrupts(grace_s, on_force)
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGINT, interrupts.python_handler)
    threading.Thread(target=interrupts.watch, args=(read_end,), name="interrupt-watch", daemon=True).start()


def exit_within(seconds: float, code: int = 0) -> None:
    """End the process with `code` if it has not ended `seconds` from now: for a command whose work is done and
    saved, whose interpreter exit would otherwise wait on a worker thread blocked in I/O (a download reading a
    stalled connection, until its read timeout) while joining the thread pools."""

    def end() -> None:
        time.sleep(seconds)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)

    threading.Thread(target=end, name="exit-deadline", daemon=True).start()
