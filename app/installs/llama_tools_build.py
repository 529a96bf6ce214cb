"""Build llama.cpp's quality tools (llama-perplexity, llama-quantize, llama-imatrix) from the same pinned sources
and with the same flags as llama-server (app.installs.llama_server_build), as one build.

The result lands in `<dest>/llama-tools-<version>-<backend>/` with a build-info.json beside the three executables.
Once compiling has begun, the cmake tree is kept after a failure or a pause so that running again continues where it
stopped; a cancel, a success or a failure before anything was compiled removes it. `$MODELDECK_LLAMA_TOOLS` points
ModelDeck at a folder holding tools of the user's own.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from app.bounded_json import load_json
from app.installs.llama_server_build import (
    BuildError,
    BuildResult,
    CmakeTree,
    cmake_build,
    install_server,
    staged_folder,
)
from app.task import TaskState
from engines.llama_server import EXECUTABLE

TOOLS = ("llama-perplexity", "llama-quantize", "llama-imatrix")
TOOLS_PREFIX = "llama-tools"
TOOLS_ENV = "MODELDECK_LLAMA_TOOLS"
BUILD_INFO = "build-info.json"


@dataclass(frozen=True)
class ToolsBuild:
    """One folder with the three tools, and what it was built from (None: not recorded)."""

    folder: Path
    version: str | None
    backend: str | None

    def tool(self, name: str) -> Path:
        return self.folder / name


def _complete(folder: Path) -> bool:
    return all((folder / name).is_file() and os.access(folder / name, os.X_OK) for name in TOOLS)


def installed_tools(root: Path) -> list[ToolsBuild]:
    """The tool builds under `root`, newest version first; a folder without its build-info.json is not one."""
    found: list[ToolsBuild] = []
    if not root.is_dir():
        return found
    for folder in sorted(root.glob(f"{TOOLS_PREFIX}-*"), reverse=True):
        try:
            info = load_json((folder / BUILD_INFO).read_bytes())
        except (OSError, ValueError):  # ValueError: BadJson, not UTF-8, not JSON or nested too deeply
            continue
        if isinstance(info, dict) and _complete(folder):
            found.append(ToolsBuild(folder, info.get("llama_cpp_python"), info.get("backend")))
    return found


def find_tools(builds_root: Path) -> ToolsBuild | None:
    """`$MODELDECK_LLAMA_TOOLS` when set (a folder with the three tools, or one that holds builds), else the newest
    build ModelDeck made; None when there is none."""
    configured = os.environ.get(TOOLS_ENV)
    if configured:
        folder = Path(configured).expanduser()
        if _complete(folder):
            return ToolsBuild(folder, None, None)
        builds = installed_tools(folder)
        return builds[0] if builds else None
    builds = installed_tools(builds_root)
    return builds[0] if builds else None


def build_llama_tools(
    source: Path,
    dest: Path,
    state: TaskState,
    *,
    backend: str | None = None,
    jobs: int | None = None,
) -> ToolsBuild:
    """Configure and build the three tools of `source` (an sdist or a source tree), install them under `dest`.
    Raises BuildError (with the compiler's last lines) or Stopped (pause or cancel)."""

    def install(tree: CmakeTree) -> ToolsBuild:
        return _install(tree, dest, source)

    return cmake_build(source, dest, state, TOOLS, install, work_prefix=".build-tools", log_prefix=TOOLS_PREFIX,
                       backend=backend, jobs=jobs)  # fmt: skip


def build_llama_server_and_tools(
    source: Path,
    dest: Path,
    state: TaskState,
    *,
    backend: str | None = None,
    jobs: int | None = None,
) -> tuple[BuildResult, ToolsBuild]:
    """llama-server and the three tools from one cmake tree, installed as the two builds would install them: ggml
    and llama are compiled once, where two builds compile them twice (on 2 cores the tools alone took 13 minutes
    after the server's 8). The tree is the server build's own, so a paused server build is continued."""

    def install(tree: CmakeTree) -> tuple[BuildResult, ToolsBuild]:
        return install_server(tree, dest, source), _install(tree, dest, source)

    return cmake_build(source, dest, state, (EXECUTABLE, *TOOLS), install, work_prefix=".build",
                       log_prefix=EXECUTABLE, backend=backend, jobs=jobs)  # fmt: skip


def _install(tree: CmakeTree, dest: Path, source: Path) -> ToolsBuild:
    build, version, backend, flags = tree.build, tree.version, tree.backend, tree.flags
    target = dest / f"{TOOLS_PREFIX}-{version}-{backend}"
    with staged_folder(target) as staging:  # installed_tools never sees a half-copied build
        for name in TOOLS:
            built = next((p for p in (build / "bin" / name, build / name) if p.is_file()), None)
            if built is None:
                raise BuildError(f"the build finished but no {name} is in {build}")
            shutil.copy2(built, staging / name)
        info = {"llama_cpp_python": version, "backend": backend, "flags": flags, "source": str(source),
                "tools": list(TOOLS)}  # fmt: skip
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return ToolsBuild(target, version, backend)
