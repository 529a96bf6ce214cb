"""Exec wrapper for engine processes: arrange to die with the service, then become the engine.

Run as `python -I -S _exec_wrapper.py PROGRAM ARGS...` (stdlib only, so it starts in milliseconds).
On Linux the parent-death signal is set with prctl before exec, and it survives exec: when the service dies,
even by SIGKILL, the kernel kills the engine. If the service died before prctl ran, the wrapper has already
been re-parented and exits instead of starting an orphan. macOS and Windows use other mechanisms (README).
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main() -> None:
    argv = sys.argv[1:]
    if not argv:
        sys.exit("usage: _exec_wrapper.py PROGRAM [ARGS...]")
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            sys.exit(f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(ctypes.get_errno())}")
        expected_parent = int(os.environ.get("MODELDECK_PARENT_PID", "0"))
        if expected_parent and os.getppid() != expected_parent:
            sys.exit("the ModelDeck service exited before the engine started")
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"cannot run {argv[0]}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        sys.exit(127)


if __name__ == "__main__":
    main()
