"""Exec wrapper for engine processes: arrange to die with the service, then become the engine.

Run as `python -I -S _exec_wrapper.py PROGRAM ARGS...` (stdlib only, so it starts in milliseconds).
On Linux the parent-death signal is set with prctl before exec, and it survives exec: when the service dies,
even by SIGKILL, the kernel kills the engine. If the service died before prctl ran, the wrapper has already
been re-parented and exits instead of starting an orphan.

The parent-death signal reaches the engine only, not the processes the engine starts (vLLM's workers, a
launcher's shards), and exists on Linux only. So, where the service passed the read end of its lifeline pipe
(engines/processes.py), the wrapper also starts a watcher (`--watch FD`) that stays in the engine's process
group: it waits for the pipe to close (the service is gone, however it died) and then kills the whole group; it
exits by itself when the engine does. Windows uses other mechanisms (docs/ENGINES.md, "Engine supervision").
"""

import ctypes
import os
import select
import signal
import sys

PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_S = 1.0  # how often the watcher checks that the engine is still its parent


def _watch(lifeline: int) -> None:
    """Run as `_exec_wrapper.py --watch FD` by the wrapper's child: kill the process group when the service's
    lifeline closes; exit when the engine (this process's parent) does."""
    engine = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in a terminal is the service's to handle
    while os.getppid() == engine:
        readable, _, _ = select.select([lifeline], [], [], WATCH_INTERVAL_S)
        if readable:  # end of file: every write end is closed, so the service has exited
            os.killpg(0, signal.SIGKILL)  # the engine, its children, and this watcher
    os._exit(0)


def _start_watcher() -> None:
    value = os.environ.pop("MODELDECK_LIFELINE_FD", "")
    if not value.isdigit() or not hasattr(os, "fork"):
        return
    lifeline = int(value)
    if os.fork() == 0:
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # the engine's output pipe must close when the engine exits, not the watcher
                os.dup2(devnull, fd)
            # A command line of its own: in `ps` it is the watcher, not a second copy of the engine's command.
            # A packaged (frozen) ModelDeck's executable runs scripts through its entry point, not python's flags
            # (engines/python_entry.py, which this stdlib-only script cannot import).
            script = ["--run-python-script"] if getattr(sys, "frozen", False) else ["-I", "-S"]
            os.execv(sys.executable, [sys.executable, *script, os.path.abspath(__file__), "--watch", value])
        finally:
            os._exit(0)
    os.close(lifeline)  # the engine itself has no use for it


def main() -> None:
    argv = sys.argv[1:]
    if not argv:
        sys.exit("usage: _exec_wrapper.py PROGRAM [ARGS...]")
    if argv[0] == "--watch" and len(argv) == 2 and argv[1].isdigit():
        _watch(int(argv[1]))
        return
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            sys.exit(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
        expected_parent = int(os.environ.get("MODELDECK_PARENT_PID", "0"))
        if expected_parent and os.getppid() != expected_parent:
            sys.exit("the ModelDeck service exited before the engine started")
    _start_watcher()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"cannot run {argv[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        sys.exit(127)


if __name__ == "__main__":
    main()
