"""Finding an engine that lives outside ModelDeck: its executable on PATH, the Python beside it, its version.

Engines such as SGLang and TensorRT-LLM pin their own torch and live in environments of their own; their console
script on PATH tells where: the `python` in the same bin directory runs their modules.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

VERSION_TIMEOUT_S = 60.0


def find_executable(name: str, path: str | None = None) -> Path | None:
    """`name` on PATH (or on `path`, a PATH-like string), as an absolute path."""
    found = shutil.which(name, path=path)
    return Path(found).absolute() if found else None


def sibling_python(executable: Path) -> Path | None:
    """The interpreter of the environment a console script belongs to: `python` in its bin directory."""
    for name in ("python", "python3", "python.exe"):
        candidate = executable.parent / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def command_output(argv: list[str], timeout_s: float = VERSION_TIMEOUT_S) -> str | None:
    """The last line `argv` prints on success, or None when it cannot run or fails."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1].strip() if done.returncode == 0 and lines else None


def distribution_version(python: Path, distribution: str) -> str | None:
    """The installed version of `distribution` in `python`'s environment, read from its metadata: the package
    itself is not imported (SGLang and TensorRT-LLM take seconds and a GPU to import)."""
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    return command_output([str(python), "-I", "-c", code])
