"""Build llama-server from the llama.cpp sources vendored in llama-cpp-python's source distribution.

A plain function that takes a TaskState (progress and cancel), so the CLI, the service and the tests run it alike.
The result lands in `<dest>/llama-server-<version>-<backend>/llama-server` with a build-info.json beside it, where
engines.llama_server.installed_builds finds it. Once compiling has begun, the build directory is kept after a
failure or a pause, so that running it again continues where cmake stopped; a cancel, a success or a failure before
anything was compiled removes it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypeVar

from filelock import FileLock, Timeout

from app.bounded_json import load_json
from app.installs.child_output import output_lines, stop_group
from app.task import Stopped, TaskState
from engines.llama_server import BUILD_INFO, CPU_VARIANT, EXECUTABLE

PINNED_VERSION = "0.3.36"
BACKENDS = ("cpu", "cuda", "metal")
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")
_OPTION = re.compile(r"option\(\s*([A-Z0-9_]+)")
VENDORED = "vendor/llama.cpp"
KILL_GRACE_S = 5.0

# Options set only where the sources declare them (their names changed between llama.cpp versions): no tests or
# examples, the server alone, no web UI fetched at build time, no TLS or curl (the engine talks to us on loopback).
_OPTIONAL_FLAGS = (
    ("LLAMA_BUILD_TESTS", "OFF"),
    ("LLAMA_BUILD_EXAMPLES", "OFF"),
    ("LLAMA_BUILD_TOOLS", "ON"),
    ("LLAMA_BUILD_SERVER", "ON"),
    ("LLAMA_BUILD_APP", "OFF"),
    ("LLAMA_BUILD_UI", "OFF"),
    ("LLAMA_USE_PREBUILT_UI", "OFF"),
    ("LLAMA_OPENSSL", "OFF"),
    ("LLAMA_CURL", "OFF"),
)


class BuildError(Exception):
    """The build could not be done; the message says why and where the full log is."""


@dataclass(frozen=True)
class BuildResult:
    executable: Path
    version: str
    backend: str
    flags: tuple[str, ...]


def detect_backend(*, for_package: bool = False) -> tuple[str, str]:
    """The backend this machine can build for, and why: CUDA needs nvcc with the cuBLAS that ggml's CUDA backend
    links, and an NVIDIA driver unless the build is `for_package` (the CUDA library then loads where one is);
    Metal a Mac."""
    if sys.platform == "darwin":
        return "metal", "macOS: Metal"
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return "cpu", "CPU: no CUDA toolkit (nvcc) on PATH"
    if not for_package and not Path("/proc/driver/nvidia/version").exists():
        return "cpu", f"CPU: {nvcc} is here but no NVIDIA driver is loaded"
    gap = cuda_toolkit_gap()
    if gap:
        return "cpu", f"CPU: {nvcc} is here but {gap}"
    return "cuda", f"CUDA: {nvcc}" + ("" if for_package else " and an NVIDIA driver")


_CUDA_PROBE = """cmake_minimum_required(VERSION 3.18)
project(cuda_probe LANGUAGES C)
find_package(CUDAToolkit)
if(NOT TARGET CUDA::cublas)
  message(FATAL_ERROR "no cuBLAS")
endif()
"""


# Where cmake's FindCUDAToolkit looks for a toolkit, besides the nvcc on PATH and /usr/local/cuda.
_TOOLKIT_ENV = ("CUDAToolkit_ROOT", "CUDA_PATH")


def cuda_toolkit_gap() -> str | None:
    """What the CUDA toolkit lacks for ggml's CUDA backend, as cmake finds it (a toolkit of nvcc and the runtime
    alone has no cuBLAS); None when nothing is missing, or when cmake is not here to tell (the build says so).

    cmake is asked once per process for a toolkit (the cmake and nvcc found, the variables that point at one): a
    build asks again after detect_backend asked. A long-lived process calls forget_cuda_toolkit before a build."""
    cmake = shutil.which("cmake")
    if cmake is None:
        return None
    return _probe_cuda_toolkit(cmake, shutil.which("nvcc"), *(os.environ.get(name) for name in _TOOLKIT_ENV))


def forget_cuda_toolkit() -> None:
    """Let the next cuda_toolkit_gap ask cmake again (cuBLAS may have been installed since)."""
    _probe_cuda_toolkit.cache_clear()


@functools.cache
def _probe_cuda_toolkit(cmake: str, *toolkit: str | None) -> str | None:
    """cuda_toolkit_gap's answer; `toolkit` is only the cache's key."""
    with tempfile.TemporaryDirectory(prefix="modeldeck-cuda-probe-") as folder:
        (Path(folder) / "CMakeLists.txt").write_text(_CUDA_PROBE, encoding="utf-8")
        done = subprocess.run([cmake, "-S", folder, "-B", str(Path(folder) / "build")], capture_output=True,
                              text=True, errors="replace", stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    if done.returncode == 0:
        return None
    if "no cuBLAS" in done.stderr:
        return "its CUDA toolkit has no cuBLAS (libcublas), which ggml's CUDA backend links"
    return "cmake does not find its CUDA toolkit: " + " ".join(done.stderr.split())[-300:]


# A portable build runs on any CPU of its architecture: ggml's CPU code is built once per instruction-set level as a
# library of its own (libggml-cpu-haswell.so, ...) and the best one this CPU supports is loaded at start. The
# libraries sit beside the executable, which finds them through its RPATH ($ORIGIN) wherever the folder is moved.
_PORTABLE_FLAGS = (
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    "-DGGML_BACKEND_DL=ON",
    "-DGGML_CPU_ALL_VARIANTS=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
)


# Intel's AMX tile instructions are left out of every build: under some virtual machines (seen on this project's
# Xeon machines, Firecracker) the CPU and the kernel report AMX and grant it, yet ggml's first tile instruction
# dies with SIGILL, so the engine crashed on any prompt long enough for ggml's AMX kernels. The cost is on Xeons
# whose AMX works: their prompt processing on the CPU falls back to AVX-512.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
AMX_VARIANTS = frozenset({"sapphirerapids"})  # a portable build's CPU variants that use AMX: not installed


def _builds_amx() -> bool:
    """Whether a build for this machine would use AMX unless told not to: GCC or Clang on x86-64 (MSVC has none)."""
    return platform.machine().lower() in ("x86_64", "amd64") and sys.platform != "win32"


def cmake_flags(source: Path, backend: str, *, portable: bool = False) -> list[str]:
    """The configure flags for `source` (a llama.cpp tree) and `backend`; `portable`: for any CPU of this
    architecture, not only this machine's (what a package ships)."""
    if backend not in BACKENDS:
        raise BuildError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    try:
        declared = set(_OPTION.findall((source / "CMakeLists.txt").read_text(encoding="utf-8", errors="replace")))
    except OSError as exc:
        raise BuildError(f"{source} has no readable CMakeLists.txt: {exc}") from exc
    flags = ["-DCMAKE_BUILD_TYPE=Release", *(_PORTABLE_FLAGS if portable else ["-DBUILD_SHARED_LIBS=OFF"])]
    flags += [f"-D{name}={value}" for name, value in _OPTIONAL_FLAGS if name in declared]
    flags.append(f"-DGGML_CUDA={'ON' if backend == 'cuda' else 'OFF'}")
    if backend == "metal":
        flags.append("-DGGML_METAL=ON")
    if not portable and _builds_amx():  # -march=native would add AMX; an explicit -mno- wins over it
        flags += [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
    return flags


def _cpu_reports_amx() -> bool:
    """Whether this CPU says it has AMX (where -march=native compiles it in); only Linux says so here."""
    try:
        return " amx_tile" in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def uses_amx(folder: Path) -> bool:
    """Whether the build in `folder` (its build-info.json) may run AMX code: a build for this machine, an AMX CPU,
    made before AMX was left out, or a portable one that carries an AMX variant."""
    try:
        info = load_json((folder / BUILD_INFO).read_bytes())
    except (OSError, ValueError):  # ValueError: BadJson, not UTF-8, not JSON or nested too deeply
        return False
    if not isinstance(info, dict):
        return False
    if info.get("portable"):
        return any(_variant(name) in AMX_VARIANTS for name in info.get("cpu_variants") or ())
    return _cpu_reports_amx() and f"-DCMAKE_C_FLAGS={NO_AMX}" not in info.get("flags", ())


def drop_amx_variants(folder: Path) -> None:
    """Remove the AMX CPU variants from a portable build made before they were left out; ggml then loads the best
    of the others."""
    info_path = folder / BUILD_INFO
    info = json.loads(info_path.read_text(encoding="utf-8"))
    kept = [name for name in info.get("cpu_variants") or () if _variant(name) not in AMX_VARIANTS]
    for library in folder.glob("libggml-cpu-*.so"):
        if _variant(library.name) in AMX_VARIANTS:
            library.unlink()
    info["cpu_variants"] = kept
    info_path.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")


def _variant(library: str) -> str:
    match = CPU_VARIANT.fullmatch(library)
    return match.group(1) if match else ""


def _unpack(sdist: Path, work: Path) -> tuple[Path, str]:
    """llama.cpp's tree out of the sdist (only the vendored part) and the release's version."""
    target = work / "src"
    try:
        with tarfile.open(sdist) as archive:
            members = [m for m in archive.getmembers() if f"/{VENDORED}/" in m.name or m.name.endswith("/PKG-INFO")]
            if not any(f"/{VENDORED}/" in m.name for m in members):
                raise BuildError(f"{sdist} holds no {VENDORED}: is it llama-cpp-python's source distribution?")
            if not (target / "done").exists():
                shutil.rmtree(target, ignore_errors=True)
                archive.extractall(target, members=members, filter="data")
                (target / "done").touch()
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise BuildError(f"{sdist} is not a whole .tar.gz ({exc}): download it again") from None
    pkg_info = next(target.glob("*/PKG-INFO"), None)
    version = "unknown"
    if pkg_info is not None:
        line = next((ln for ln in pkg_info.read_text(errors="replace").splitlines() if ln.startswith("Version:")), "")
        version = line.removeprefix("Version:").strip() or version
    return next(target.glob(f"*/{VENDORED}")), version


def _source_tree(source: Path, work: Path) -> tuple[Path, str]:
    if source.is_file():
        return _unpack(source, work)
    if (source / VENDORED / "CMakeLists.txt").is_file():
        return source / VENDORED, "unknown"
    if (source / "CMakeLists.txt").is_file():
        return source, "unknown"
    raise BuildError(f"{source} is neither an sdist (.tar.gz) nor a directory with a CMakeLists.txt")


def build_llama_server(
    source: Path,
    dest: Path,
    state: TaskState,
    *,
    backend: str | None = None,
    version: str | None = None,
    jobs: int | None = None,
    portable: bool = False,
) -> BuildResult:
    """Configure and build the `llama-server` target of `source` (an sdist or a source tree), install it under
    `dest`; `portable`: one CPU library per instruction-set level, the best loaded at start. Raises BuildError
    (with the compiler's last lines) or Stopped (pause or cancel)."""

    def install(tree: CmakeTree) -> BuildResult:
        return install_server(tree, dest, source, portable=portable)

    return cmake_build(source, dest, state, (EXECUTABLE,), install, work_prefix=".build", log_prefix=EXECUTABLE,
                       backend=backend, version=version, jobs=jobs, portable=portable)  # fmt: skip


@dataclass(frozen=True)
class CmakeTree:
    """A configured and compiled cmake tree of llama.cpp: its build folder and what it was built from and with."""

    build: Path
    version: str
    backend: str
    flags: list[str]


InstalledT = TypeVar("InstalledT")


def cmake_build(
    source: Path,
    dest: Path,
    state: TaskState,
    targets: Sequence[str],
    install: Callable[[CmakeTree], InstalledT],
    *,
    work_prefix: str,
    log_prefix: str,
    backend: str | None = None,
    version: str | None = None,
    jobs: int | None = None,
    portable: bool = False,
) -> InstalledT:
    """Configure and build `targets` of `source` (an sdist or a source tree) in
    `<dest>/<work_prefix>-<stem>-<backend>`, its output in `<dest>/<log_prefix>-<stem>-<backend>.log`, then
    `install` what was built. Once compiling has begun, the build folder is kept after a failure or a pause, so that
    running again continues where cmake stopped; a cancel, a success or a failure before anything was compiled (a
    source that is not llama.cpp, a compiler cmake does not find) removes it. Raises BuildError (with the compiler's
    last lines) or Stopped (pause or cancel)."""
    if not shutil.which("cmake"):
        raise BuildError(
            "cmake is not installed: install it (apt install cmake, brew install cmake, pip install cmake)"
        )
    backend = backend or detect_backend()[0]
    gap = cuda_toolkit_gap() if backend == "cuda" else None
    if gap:
        raise BuildError(f"cannot build for CUDA: {gap}; build for the CPU (--backend cpu) or install it")
    steps = _Percent(state)
    state.working_on("unpacking the sources")
    dest.mkdir(parents=True, exist_ok=True)
    stem = source.name.removesuffix(".tar.gz")
    flavour = f"{backend}-portable" if portable else backend
    work = dest / f"{work_prefix}-{stem}-{flavour}"
    log_path = dest / f"{log_prefix}-{stem}-{flavour}.log"
    with _alone_in(dest):
        made_here = not work.exists()  # else a paused or failed build's folder, kept for this run
        work.mkdir(exist_ok=True)
        compiling = False
        try:
            tree, found_version = _source_tree(source, work)
            version = version or (found_version if found_version != "unknown" else stem.rpartition("-")[2] or stem)
            flags = cmake_flags(tree, backend, portable=portable)
            jobs = jobs or os.cpu_count() or 1
            with log_path.open("w", encoding="utf-8") as log:
                state.working_on("configuring")
                configure = ["cmake", "-S", str(tree), "-B", str(work / "build"), *flags]
                _run(configure, log, steps, log_path, progress=False)
                state.working_on("compiling")
                compiling = True
                _run(["cmake", "--build", str(work / "build"), "--target", *targets, "-j", str(jobs)], log, steps,
                     log_path, progress=True)  # fmt: skip
            result = install(CmakeTree(work / "build", version, backend, flags))
        except BaseException as failure:
            cancelled = isinstance(failure, Stopped) and failure.reason == "cancel"
            if cancelled or (made_here and not compiling):
                shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
    state.working_on("done")
    steps.to(100)
    state.finish()
    return result


@contextlib.contextmanager
def _alone_in(dest: Path) -> Iterator[None]:
    """The CLI and the service may build into the same folder: one build there at a time (two cmakes in one work
    folder would wreck both, and two builds on one machine only slow each other down)."""
    lock = FileLock(dest / ".build.lock", mode=0o600)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise BuildError(f"another build is running in {dest}; wait for it to end") from None
    try:
        yield
    finally:
        lock.release()


class _Percent:
    """The build's progress in percent, as cmake's [NN%] lines tell it, passed on to the TaskState."""

    def __init__(self, state: TaskState) -> None:
        self.state = state
        self.percent = 0
        state.begin(100)

    def to(self, percent: int) -> None:
        if percent > self.percent:
            self.state.advance(percent - self.percent)
            self.percent = percent


def _run(argv: Sequence[str], log: TextIO, steps: _Percent, log_path: Path, *, progress: bool) -> None:
    """Run one cmake step in its own process group, its output to the log, its [NN%] lines to the progress; stopped
    (process group killed) as soon as the state asks."""
    state = steps.state
    process = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        errors="replace", start_new_session=True,
    )  # fmt: skip
    tail: deque[str] = deque(maxlen=25)
    try:
        for line in output_lines(process, state.check):
            log.write(line)
            tail.append(line.rstrip())
            match = _PERCENT.match(line)
            if progress and match:
                steps.to(min(99, int(match.group(1))))
    except Stopped:
        # make's children can outlive cmake by a moment: TERM to the group, a grace period, then KILL
        stop_group(process, KILL_GRACE_S)
        raise
    code = process.wait()
    if code != 0:
        errors = [ln for ln in tail if "error" in ln.lower()] or list(tail)[-10:]
        raise BuildError(f"`{' '.join(argv[:2])}` failed (exit {code}):\n" + "\n".join(errors[-10:]) +
                         f"\nFull log: {log_path}")  # fmt: skip


def install_server(tree: CmakeTree, dest: Path, source: Path, *, portable: bool = False) -> BuildResult:
    """Copy the llama-server of a compiled `tree` (with a shared build's libraries) into its folder under `dest`."""
    build, version, backend, flags = tree.build, tree.version, tree.backend, tree.flags
    built = next((p for p in (build / "bin" / EXECUTABLE, build / EXECUTABLE) if p.is_file()), None)
    if built is None:
        raise BuildError(f"the build finished but no {EXECUTABLE} is in {build}")
    target = dest / f"{EXECUTABLE}-{version}-{backend}{'-portable' if portable else ''}"
    with staged_folder(target) as staging:  # installed_builds never sees a half-copied build
        shutil.copy2(built, staging / EXECUTABLE)
        # A shared build's libraries (and a portable one's CPU variants) go beside the executable, links kept as links.
        libraries = sorted(p for p in built.parent.iterdir() if p.name.startswith("lib") and ".so" in p.name)
        libraries = [p for p in libraries if _variant(p.name) not in AMX_VARIANTS]
        for library in libraries:
            shutil.copy2(library, staging / library.name, follow_symlinks=False)
        variants = [p.name for p in libraries if CPU_VARIANT.fullmatch(p.name)]
        if portable and not variants:
            raise BuildError(f"a portable build must have CPU variant libraries (libggml-cpu-*.so) in {built.parent}")
        info = {"llama_cpp_python": version, "backend": backend, "flags": flags, "source": str(source),
                "portable": portable, "cpu_variants": variants}  # fmt: skip
        (staging / BUILD_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return BuildResult(target / EXECUTABLE, version, backend, tuple(flags))


@contextlib.contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A folder beside `target` to fill, which then replaces `target`: the folder appears whole or not at all, and a
    failure while filling it leaves no part of it behind."""
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        yield staging
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already after the rename
