"""What ModelDeck this is: its version and the git commit it was built from, for `--version` and the About box.

A packaged build carries `build_info.json` beside this module, written by installers/build.sh; a source checkout
asks git. Unknown is None.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from app import __version__
from app.bounded_json import load_json

BUILD_INFO = Path(__file__).with_name("build_info.json")
_REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Provenance:
    version: str
    commit: str | None
    source: str  # "package" (build_info.json) or "checkout" (git), or "unknown"

    def line(self) -> str:
        """`modeldeck 0.1.0 (commit 1a2b3c4d5e6f, package)`."""
        commit = f"commit {self.commit[:12]}" if self.commit else "commit unknown"
        return f"modeldeck {self.version} ({commit}, {self.source})"


def provenance() -> Provenance:
    """The version, and the commit from the build's record or from git where this runs from a checkout."""
    try:
        recorded = load_json(BUILD_INFO.read_bytes())
    except (OSError, ValueError):  # ValueError: not UTF-8, not JSON, or nested too deeply
        recorded = None
    if isinstance(recorded, dict) and isinstance(recorded.get("commit"), str):
        return Provenance(__version__, recorded["commit"], "package")
    return Provenance(__version__, _git_commit(), "checkout" if (_REPO / ".git").exists() else "unknown")


def _git_commit() -> str | None:
    git = shutil.which("git")
    if git is None or not (_REPO / ".git").exists():
        return None
    try:
        done = subprocess.run(
            [git, "-C", str(_REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and len(commit) == 40 else None
