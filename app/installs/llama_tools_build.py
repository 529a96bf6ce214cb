"""Build llama.cpp's quality tools (llama-perplexity, llama-quantize, llama-imatrix) from the same pinned sources
and with the same flags as llama-server (app.installs.llama_server_build), as one build.

The result lands in `<dest>/llama-tools-<version>-<backend>/` with a build-info.json beside the three executables.
The cmake tree is kept after a failure or a pause so that running again continues where it stopped; a cancel or a
success removes it. `$MODELDECK_LLAMA_TOOLS` points ModelDeck at a folder holding tools of the user's own.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from app.hub.task import Stopped, TaskState
from app.installs.llama_server_build import (
    BuildError,
    _Percent,
    _run,
    _source_tree,
    cmake_flags,
    detect_backend,
)

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
            info = json.loads((folder / BUILD_INFO).read_text(encoding="utf-8"))
        except (OSError, ValueError):
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
    if not shutil.which("cmake"):
        raise BuildError(
            "cmake is not installed: install it (apt install cmake, brew install cmake, pip install cmake)"
        )
    backend = backend or detect_backend()[0]
    steps = _Percent(state)
    state.working_on("unpacking the sources")
    dest.mkdir(parents=True, exist_ok=True)
    stem = source.name.removesuffix(".tar.gz")
    work = dest / f".build-tools-{stem}-{backend}"
    work.mkdir(exist_ok=True)
    log_path = dest / f"{TOOLS_PREFIX}-{stem}-{backend}.log"
    try:
        tree, found_version = _source_tree(source, work)
        version = found_version if found_version != "unknown" else stem.rpartition("-")[2] or stem
        flags = cmake_flags(tree, backend)
        with log_path.open("w", encoding="utf-8") as log:
            state.working_on("configuring")
            _run(["cmake", "-S", str(tree), "-B", str(work / "build"), *flags], log, steps, log_path, progress=False)
            state.working_on("compiling")
            _run(["cmake", "--build", str(work / "build"), "--target", *TOOLS, "-j", str(jobs or os.cpu_count() or 1)],
                 log, steps, log_path, progress=True)  # fmt: skip
        result = _install(work / "build", dest, version, backend, flags, source)
    except Stopped as stopped:
        if stopped.reason == "cancel":
            shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    state.working_on("done")
    steps.to(100)
    state.finish()
    return result


def _install(build: Path, dest: Path, version: str, backend: str, flags: list[str], source: Path) -> ToolsBuild:
    target = dest / f"{TOOLS_PREFIX}-{version}-{backend}"
    staging = dest / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in TOOLS:
        built = next((p for p in (build / "bin" / name, build / name) if p.is_file()), None)
        if built is None:
            raise BuildError(f"the build finished but no {name} is in {build}")
        shutil.copy2(built, staging / name)
    info = {"llama_cpp_python": version, "backend": backend, "flags": flags, "source": str(source),
            "tools": list(TOOLS)}  # fmt: skip
    (staging / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    # The folder appears whole or not at all: installed_tools never sees a half-copied build.
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return ToolsBuild(target, version, backend)
