"""How a child process runs Python code: `python -m MODULE` from a source install, or, in a packaged (frozen) build,
the package's own executable with an entry-point flag, since a frozen executable takes no `-m`.

The packaged executable's first step is `run_entry_point(sys.argv)`: it runs the module or script asked for and
returns True, or returns False and the executable goes on as `modeldeck`.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

RUN_MODULE = "--run-python-module"
RUN_SCRIPT = "--run-python-script"


def is_frozen() -> bool:
    """Whether this runs from a packaged build (PyInstaller sets sys.frozen)."""
    return bool(getattr(sys, "frozen", False))


def module_command(module: str) -> list[str]:
    """The argv prefix that runs `module` as __main__ in a new process of this installation."""
    return [sys.executable, RUN_MODULE, module] if is_frozen() else [sys.executable, "-m", module]


def script_command(script: Path, *, site: bool = False) -> list[str]:
    """The argv prefix that runs `script` isolated from the user's environment variables and the script's own
    folder (-I); without `site`, a stdlib-only script, also without site-packages (-S: it starts faster)."""
    if is_frozen():
        return [sys.executable, RUN_SCRIPT, str(script)]
    return [sys.executable, "-I", *([] if site else ["-S"]), str(script)]


def run_entry_point(argv: Sequence[str]) -> bool:
    """In a packaged executable: run the module or script `argv` names, with sys.argv as `python -m` would set it."""
    if len(argv) < 3 or argv[1] not in (RUN_MODULE, RUN_SCRIPT):
        return False
    target, rest = argv[2], list(argv[3:])
    if argv[1] == RUN_MODULE:
        sys.argv = [target, *rest]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target, *rest]
        runpy.run_path(target, run_name="__main__")
    return True
