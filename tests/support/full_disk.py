"""A full disk, as near as a test can make one: a child process whose files cannot grow past 4 KiB (RLIMIT_FSIZE).
The kernel then refuses a write part-way as a full disk does: the first 4 KiB land, the rest fails (EFBIG where a
disk says ENOSPC)."""

from __future__ import annotations

import subprocess
import sys

LIMIT = 4096

_CHILD = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write then fails with EFBIG instead of killing the child
resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, {LIMIT}))
try:
    exec(sys.argv[1])
except OSError as exc:
    print(exc.errno)
"""


def errno_of_a_full_disk(code: str) -> str:
    """Run `code` (Python that writes more than 4 KiB) in a child process with the limit; the errno of the OSError it
    raised, as text (empty when it raised none)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, code], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.strip()
