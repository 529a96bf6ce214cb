"""llama-cpp-python's source distribution downloaded with pip, stoppable at once: the service's build runs it on a
worker thread, and a Cancel must not wait for pip's network timeouts (the CLI's fetch_sdist cannot be stopped)."""

from __future__ import annotations

import subprocess
import sys
from collections import deque
from pathlib import Path

from app.hub.task import Stopped, TaskState
from app.installs.child_output import output_lines, stop_group
from app.installs.llama_server_build import BuildError

KILL_GRACE_S = 5.0
ERROR_LINES = 8


def sdist_path(directory: Path, version: str) -> Path:
    """Where pip puts the sdist of `version` in `directory`."""
    return directory / f"llama_cpp_python-{version}.tar.gz"


def download_sdist(directory: Path, version: str, state: TaskState) -> Path:
    """The sdist of llama_cpp_python `version` in `directory` (kept there: a second build does not download it
    again). Raises BuildError with pip's last lines, or Stopped when the state asks (pip's group killed first)."""
    found = sdist_path(directory, version)
    if found.is_file():
        return found
    directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", f"llama_cpp_python=={version}", "--no-deps", "--no-binary",
            ":all:", "--progress-bar", "off", "-d", str(directory)]  # fmt: skip
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
    if code != 0 or not found.is_file():
        raise BuildError(f"pip could not download llama_cpp_python=={version} (exit {code}): " + " ".join(said))
    return found
