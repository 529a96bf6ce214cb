"""llama-cpp-python's source distribution downloaded with pip, stoppable at once: the service's build runs it on a
worker thread and the CLI's under Ctrl-C, and a Cancel must not wait for pip's network timeouts."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import tempfile
import zlib
from collections import deque
from pathlib import Path

from app.installs.child_output import output_lines, stop_group
from app.installs.llama_server_build import BuildError
from app.task import Stopped, TaskState

KILL_GRACE_S = 5.0
ERROR_LINES = 8
READ_CHUNK = 1 << 20


def sdist_path(directory: Path, version: str) -> Path:
    """Where the sdist of `version` is kept in `directory`."""
    return directory / f"llama_cpp_python-{version}.tar.gz"


def download_sdist(directory: Path, version: str, state: TaskState) -> Path:
    """The sdist of llama_cpp_python `version` in `directory` (kept there: a second build does not download it
    again; one found damaged is downloaded again). Raises BuildError with pip's last lines, or Stopped when the
    state asks (pip's group killed first)."""
    found = sdist_path(directory, version)
    if found.is_file():
        if whole_gzip(found):
            return found
        found.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    # pip copies into its folder as it goes: a stop in the middle would leave a piece under the kept name.
    with tempfile.TemporaryDirectory(dir=directory, prefix=".downloading-") as landing:
        argv = [sys.executable, "-m", "pip", "download", f"llama_cpp_python=={version}", "--no-deps", "--no-binary",
                ":all:", "--progress-bar", "off", "-d", landing]  # fmt: skip
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            errors="replace", start_new_session=True,
        )  # fmt: skip
        said: deque[str] = deque(maxlen=ERROR_LINES)
        try:
            for line in output_lines(process, state.check):
                if line.strip():
                    said.append(line.rstrip())
        except Stopped:
            stop_group(process, KILL_GRACE_S)
            raise
        code = process.wait()
        landed = sdist_path(Path(landing), version)
        if code != 0 or not landed.is_file():
            raise BuildError(f"pip could not download llama_cpp_python=={version} (exit {code}): " + " ".join(said))
        os.replace(landed, found)
    return found


def whole_gzip(archive: Path) -> bool:
    """Whether `archive` reads to its end as gzip (a download cut short does not)."""
    try:
        with gzip.open(archive) as stream:
            while stream.read(READ_CHUNK):
                pass
    except (OSError, EOFError, zlib.error):
        return False
    return True
