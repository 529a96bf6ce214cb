"""The llama-server build driver against a tiny real cmake project (seconds, not the 6 minutes of llama.cpp):
configure, build with progress, install where the adapter finds it, cancel, and a failing build explained.
The real build of the vendored llama.cpp is what installers/test.sh runs; its output is used by the service tests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import tarfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from filelock import FileLock

from app.installs.llama_server_build import (
    NO_AMX,
    BuildError,
    build_llama_server,
    cmake_flags,
    cuda_toolkit_gap,
    detect_backend,
    drop_amx_variants,
    forget_cuda_toolkit,
    uses_amx,
)
from app.task import Progress, Stopped, TaskState
from engines.llama_server import LlamaServerEngine, cpu_variant, installed_builds

MAIN_C = r"""
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) { fprintf(stderr, "version: tiny-1 (test)\n"); return 0; }
    return 1;
}
"""
CMAKELISTS = """
cmake_minimum_required(VERSION 3.16)
project(tiny C)
option(LLAMA_BUILD_SERVER "server" OFF)
option(LLAMA_OPENSSL "tls" ON)
add_library(part1 STATIC part1.c)
add_library(part2 STATIC part2.c)
add_executable(llama-server main.c)
target_link_libraries(llama-server part1 part2)
set_target_properties(llama-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(unrelated main.c)
"""


def tiny_project(root: Path, main_c: str = MAIN_C, extra: str = "") -> Path:
    root.mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(CMAKELISTS + extra)
    (root / "main.c").write_text(main_c)
    (root / "part1.c").write_text("int part1(void) { return 1; }\n")
    (root / "part2.c").write_text("int part2(void) { return 2; }\n")
    return root


def tiny_sdist(tmp_path: Path, version: str = "9.9.9") -> Path:
    """The tiny project laid out as llama-cpp-python's sdist."""
    return sdist_of(tiny_project(tmp_path / "project"), tmp_path, version)


def sdist_of(project: Path, folder: Path, version: str = "9.9.9") -> Path:
    """`project` laid out as llama-cpp-python's sdist: vendor/llama.cpp and a PKG-INFO with the version."""
    sdist = folder / f"llama_cpp_python-{version}.tar.gz"
    top = f"llama_cpp_python-{version}"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(project, arcname=f"{top}/vendor/llama.cpp")
        info = f"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: {version}\n".encode()
        entry = tarfile.TarInfo(f"{top}/PKG-INFO")
        entry.size = len(info)
        archive.addfile(entry, io.BytesIO(info))
    return sdist


def test_an_sdist_builds_installs_and_is_found(tmp_path: Path) -> None:
    events: list[Progress] = []
    state = TaskState(events.append, interval_s=0.0)
    dest = tmp_path / "builds"
    result = build_llama_server(tiny_sdist(tmp_path), dest, state, backend="cpu", jobs=2)

    assert result.executable == dest / "llama-server-9.9.9-cpu" / "llama-server"
    assert result.version == "9.9.9" and result.backend == "cpu"
    # Options only where the sources declare them; the server target alone was built.
    assert "-DLLAMA_BUILD_SERVER=ON" in result.flags and "-DLLAMA_OPENSSL=OFF" in result.flags
    assert not any("LLAMA_USE_PREBUILT_UI" in flag for flag in result.flags)
    assert "-DBUILD_SHARED_LIBS=OFF" in result.flags and "-DGGML_CUDA=OFF" in result.flags
    # Progress from cmake's [NN%] lines: rising, ending at 100 and finished.
    dones = [event.done for event in events]
    assert dones == sorted(dones) and len(set(dones)) > 2
    assert events[-1].finished and events[-1].done == 100
    # The adapter finds it, as it finds the build installers/test.sh made, and runs it.
    assert [b.executable for b in installed_builds(dest)] == [result.executable]
    installation = LlamaServerEngine(build_roots=[dest]).detect()
    assert installation.installed and installation.version == "tiny-1 (test)"
    assert not list(dest.glob(".build-*")), "the build directory is removed after a success"


def test_a_failing_build_says_what_the_compiler_said(tmp_path: Path) -> None:
    source = tiny_project(tmp_path / "broken", main_c="int main(void) { return undeclared_thing; }\n")
    dest = tmp_path / "builds"
    with pytest.raises(BuildError) as failed:
        build_llama_server(source, dest, TaskState(), backend="cpu", jobs=1)
    message = str(failed.value)
    assert "undeclared_thing" in message and "error" in message
    log = Path(message.rsplit("Full log: ", 1)[1].strip())
    assert log.is_file() and "undeclared_thing" in log.read_text()
    assert installed_builds(dest) == []  # nothing half-installed


def test_cancel_stops_the_compiler_at_once_and_installs_nothing(tmp_path: Path) -> None:
    """The build waits on a slow step (a 60 s sleep standing in for a long compile that prints nothing)."""
    slow = "add_custom_target(slow COMMAND ${CMAKE_COMMAND} -E sleep 60)\nadd_dependencies(llama-server slow)\n"
    source = tiny_project(tmp_path / "slow", extra=slow)
    dest = tmp_path / "builds"
    state = TaskState()
    outcome: list[BaseException] = []

    def build() -> None:
        try:
            build_llama_server(source, dest, state, backend="cpu", jobs=1)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    def sleeping() -> bool:
        for process in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):  # a finished step may be a zombie, or gone
                if "sleep" in " ".join(process.cmdline()):
                    return True
        return False

    worker = threading.Thread(target=build)
    worker.start()
    try:
        deadline = time.monotonic() + 60
        while not sleeping():
            assert time.monotonic() < deadline and worker.is_alive(), f"the slow step never started: {outcome}"
            time.sleep(0.05)
    finally:
        cancelled_at = time.monotonic()
        state.cancel()
        worker.join(timeout=30)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled_at < 10
    assert len(outcome) == 1 and isinstance(outcome[0], Stopped) and outcome[0].reason == "cancel"
    assert installed_builds(dest) == [] and not list(dest.glob(".build-*"))
    # (the autouse fixture fails the test if cmake, make or the sleep outlived the cancel)


@pytest.mark.parametrize(
    ("make_source", "words"),
    [
        (lambda tmp: tmp, "neither an sdist"),
        (lambda tmp: _tarball_without_sources(tmp), "holds no vendor/llama.cpp"),
        (lambda tmp: _cut_short(tiny_sdist(tmp)), "is not a whole .tar.gz"),
    ],
)
def test_a_source_that_is_not_llama_cpp_is_refused(tmp_path: Path, make_source: object, words: str) -> None:
    source = make_source(tmp_path)  # type: ignore[operator]
    dest = tmp_path / "builds"
    with pytest.raises(BuildError, match=words):
        build_llama_server(source, dest, TaskState(), backend="cpu")
    assert [p.name for p in dest.iterdir()] == [".build.lock"], "nothing but the lock is left in the builds folder"


def _cut_short(sdist: Path) -> Path:
    """`sdist` as an interrupted download leaves it: its files start to unpack, then the archive ends."""
    whole = sdist.read_bytes()
    sdist.write_bytes(whole[: len(whole) // 2])
    return sdist


def test_a_compiler_cmake_cannot_find_leaves_its_log_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    dest = tmp_path / "builds"
    with pytest.raises(BuildError, match="cmake -S` failed") as failed:
        build_llama_server(tiny_sdist(tmp_path), dest, TaskState(), backend="cpu", jobs=1)
    log = dest / "llama-server-llama_cpp_python-9.9.9-cpu.log"
    assert f"Full log: {log}" in str(failed.value) and "no-such-cc" in log.read_text()
    assert sorted(p.name for p in dest.iterdir()) == [".build.lock", log.name]


def _tarball_without_sources(tmp_path: Path) -> Path:
    path = tmp_path / "llama_cpp_python-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        entry = tarfile.TarInfo("llama_cpp_python-1.0/README.md")
        archive.addfile(entry, io.BytesIO(b""))
    return path


def test_an_unknown_backend_is_refused(tmp_path: Path) -> None:
    source = tiny_project(tmp_path / "p")
    with pytest.raises(BuildError, match="unknown backend 'rocm'"):
        cmake_flags(source, "rocm")


# ggml's CPU variants as a portable build makes them: MODULE libraries beside the executable, built with it, each
# scoring itself for this CPU (ggml loads the highest; 0: it cannot run here). sapphirerapids, ggml's AMX variant,
# would score highest on an AMX CPU.
PORTABLE_EXTRA = """
file(WRITE ${CMAKE_BINARY_DIR}/x64.c "int ggml_backend_score(void) { return 1; }")
file(WRITE ${CMAKE_BINARY_DIR}/haswell.c "int ggml_backend_score(void) { return 64; }")
file(WRITE ${CMAKE_BINARY_DIR}/zen9.c "int ggml_backend_score(void) { return 0; }")
file(WRITE ${CMAKE_BINARY_DIR}/sapphirerapids.c "int ggml_backend_score(void) { return 128; }")
add_library(ggml-cpu-x64 MODULE ${CMAKE_BINARY_DIR}/x64.c)
add_library(ggml-cpu-haswell MODULE ${CMAKE_BINARY_DIR}/haswell.c)
add_library(ggml-cpu-zen9 MODULE ${CMAKE_BINARY_DIR}/zen9.c)
add_library(ggml-cpu-sapphirerapids MODULE ${CMAKE_BINARY_DIR}/sapphirerapids.c)
set_target_properties(ggml-cpu-x64 ggml-cpu-haswell ggml-cpu-zen9 ggml-cpu-sapphirerapids PROPERTIES
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_dependencies(llama-server ggml-cpu-x64 ggml-cpu-haswell ggml-cpu-zen9 ggml-cpu-sapphirerapids)
"""


def test_a_portable_build_carries_its_cpu_variants_and_says_which_one_loads(tmp_path: Path) -> None:
    source = tiny_project(tmp_path / "portable", extra=PORTABLE_EXTRA)
    result = build_llama_server(source, tmp_path / "builds", TaskState(), backend="cpu", version="9.9.9",
                                portable=True)  # fmt: skip

    directory = result.executable.parent
    assert directory.name == "llama-server-9.9.9-cpu-portable"
    for flag in ("-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON", "-DBUILD_SHARED_LIBS=ON"):
        assert flag in result.flags
    assert "-DBUILD_SHARED_LIBS=OFF" not in result.flags
    variants = ["libggml-cpu-haswell.so", "libggml-cpu-x64.so", "libggml-cpu-zen9.so"]  # no sapphirerapids
    assert sorted(p.name for p in directory.glob("libggml-cpu-*.so")) == variants
    info = json.loads((directory / "build-info.json").read_text())
    assert info["portable"] is True
    assert info["cpu_variants"] == variants
    installation = LlamaServerEngine(result.executable).detect()
    assert installation.installed and installation.detail.endswith("CPU variant haswell")  # not the AMX one
    assert not uses_amx(directory)


def test_a_portable_build_cached_with_its_amx_variant_loses_it(tmp_path: Path) -> None:
    """A build made before the AMX variant was left out (installers/build.sh keeps portable builds for weeks)."""
    folder = tmp_path / "llama-server-9.9.9-cpu-portable"
    folder.mkdir()
    variants = ["libggml-cpu-haswell.so", "libggml-cpu-sapphirerapids.so", "libggml-cpu-x64.so"]
    for name in variants:
        (folder / name).write_bytes(b"ELF")
    (folder / "build-info.json").write_text(json.dumps({"backend": "cpu", "portable": True, "cpu_variants": variants}))
    assert uses_amx(folder)

    drop_amx_variants(folder)

    assert sorted(p.name for p in folder.glob("libggml-cpu-*.so")) == ["libggml-cpu-haswell.so", "libggml-cpu-x64.so"]
    assert json.loads((folder / "build-info.json").read_text())["cpu_variants"] == [
        "libggml-cpu-haswell.so", "libggml-cpu-x64.so"
    ]  # fmt: skip
    assert not uses_amx(folder)


def test_a_build_info_nested_too_deeply_says_no_amx(tmp_path: Path) -> None:
    """installers/test.sh asks this of every build; json.loads raised RecursionError on 100,000 '['."""
    (tmp_path / "build-info.json").write_text("[" * 100_000)
    assert not uses_amx(tmp_path)


@pytest.mark.parametrize(("machine", "amx_off"), [("x86_64", True), ("aarch64", False)])
def test_a_build_for_this_machine_leaves_out_amx_on_x86(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, machine: str, amx_off: bool
) -> None:
    """llama.cpp builds with -march=native, which on an AMX CPU compiles ggml's AMX kernels; under some virtual
    machines their first tile instruction dies with SIGILL (found on this project's machines). An older build
    without the flags, on a CPU that reports AMX, is one test.sh makes again."""
    monkeypatch.setattr("platform.machine", lambda: machine)
    monkeypatch.setattr("app.installs.llama_server_build._cpu_reports_amx", lambda: amx_off)
    flags = cmake_flags(tiny_project(tmp_path / "p"), "cpu")
    assert (f"-DCMAKE_C_FLAGS={NO_AMX}" in flags and f"-DCMAKE_CXX_FLAGS={NO_AMX}" in flags) is amx_off
    assert not any("amx" in flag for flag in cmake_flags(tmp_path / "p", "cpu", portable=True))

    folder = tmp_path / "llama-server-9.9.9-cpu"
    folder.mkdir()
    (folder / "build-info.json").write_text(json.dumps({"backend": "cpu", "flags": flags}))
    assert not uses_amx(folder)
    (folder / "build-info.json").write_text(json.dumps({"backend": "cpu", "flags": ["-DGGML_CUDA=OFF"]}))
    assert uses_amx(folder) is amx_off


def test_a_portable_build_without_cpu_variants_is_refused(tmp_path: Path) -> None:
    source = tiny_project(tmp_path / "plain")
    with pytest.raises(BuildError, match="CPU variant libraries"):
        build_llama_server(source, tmp_path / "builds", TaskState(), backend="cpu", version="9.9.9", portable=True)
    assert installed_builds(tmp_path / "builds") == []
    assert not list((tmp_path / "builds").glob(".*.partial")), "no half-installed copy is left"


def test_a_build_for_this_machine_has_no_cpu_variant(tmp_path: Path) -> None:
    result = build_llama_server(tiny_project(tmp_path / "native"), tmp_path / "builds", TaskState(), backend="cpu",
                                version="9.9.9")  # fmt: skip
    assert cpu_variant(result.executable.parent) is None
    assert "CPU variant" not in LlamaServerEngine(result.executable).detect().detail


def cuda_toolkit_layout(root: Path, *, cublas: bool) -> Path:
    """A folder laid out as a CUDA toolkit, its bin/ for PATH: an nvcc that only tells its version, empty headers and
    libraries. No GPU toolkit can be relied on here; cmake's FindCUDAToolkit reads only this layout."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "lib64").mkdir()
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n")
    nvcc.chmod(0o755)
    files = ["include/cuda_runtime.h", "lib64/libcudart.so"]
    if cublas:
        files += ["include/cublas_v2.h", "lib64/libcublas.so", "lib64/libcublasLt.so"]
    for name in files:
        (root / name).touch()
    return root / "bin"


def test_a_cuda_toolkit_without_cublas_builds_for_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvcc alone (pip's CUDA packages install it so) cannot build ggml's CUDA backend: a package is built for the
    CPU instead of failing in cmake, and asking for CUDA says what is missing before anything compiles."""
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(
        "PATH", f"{cuda_toolkit_layout(tmp_path / 'nvcc-only', cublas=False)}{os.pathsep}{os.environ['PATH']}"
    )
    backend, why = detect_backend(for_package=True)
    assert backend == "cpu" and "no cuBLAS" in why, why
    with pytest.raises(BuildError, match=r"cannot build for CUDA: .*no cuBLAS"):
        build_llama_server(tiny_sdist(tmp_path), tmp_path / "builds", TaskState(), backend="cuda")
    assert not (tmp_path / "builds").exists()  # refused before anything was unpacked

    whole = cuda_toolkit_layout(tmp_path / "whole", cublas=True)
    monkeypatch.setenv("PATH", f"{whole}{os.pathsep}{os.environ['PATH']}")
    assert detect_backend(for_package=True) == ("cuda", f"CUDA: {whole / 'nvcc'}")


CUDA_PROBE_FOLDER = "modeldeck-cuda-probe-"  # the folder cmake is asked about the toolkit in


def cmake_spy(folder: Path) -> tuple[Path, Path]:
    """A cmake for PATH that notes each call's arguments in a file, then runs the real one: cmake's runs counted in
    this process and in its children alike. The folder for PATH, and the file."""
    real = shutil.which("cmake")
    assert real is not None
    folder.mkdir(parents=True)
    calls = folder / "calls"
    spy = folder / "cmake"
    spy.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{real}" "$@"\n')
    spy.chmod(0o755)
    return folder, calls


def toolkit_probes(calls: Path) -> int:
    return sum(CUDA_PROBE_FOLDER in line for line in calls.read_text().splitlines()) if calls.exists() else 0


def test_the_cuda_toolkit_is_asked_about_once_for_a_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI and the service detect the backend, then build for it, and the build checks a CUDA backend before it
    configures: cmake answers the first time, the check takes that answer."""
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    spy, calls = cmake_spy(tmp_path / "spy")
    whole = cuda_toolkit_layout(tmp_path / "whole", cublas=True)
    monkeypatch.setenv("PATH", os.pathsep.join((str(spy), str(whole), os.environ["PATH"])))
    backend, _ = detect_backend(for_package=True)
    assert backend == "cuda"
    build = build_llama_server(tiny_sdist(tmp_path), tmp_path / "builds", TaskState(), backend=backend, jobs=1)
    assert build.backend == "cuda"
    assert toolkit_probes(calls) == 1


def test_a_toolkit_completed_since_is_seen_once_the_answer_is_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service forgets the answer before each build: a user may have installed cuBLAS in the meantime."""
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    toolkit = cuda_toolkit_layout(tmp_path / "cuda", cublas=False)
    monkeypatch.setenv("PATH", f"{toolkit}{os.pathsep}{os.environ['PATH']}")
    assert "no cuBLAS" in (cuda_toolkit_gap() or "")
    for name in ("include/cublas_v2.h", "lib64/libcublas.so", "lib64/libcublasLt.so"):
        (toolkit.parent / name).touch()
    assert "no cuBLAS" in (cuda_toolkit_gap() or ""), "the answer stands until it is forgotten"
    forget_cuda_toolkit()
    assert cuda_toolkit_gap() is None


def test_a_second_build_in_the_same_folder_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    """The CLI and the service can build into one folder at once; two cmakes in one work folder would wreck both.
    The first build's lock is taken here as that build would take it (filelock, as the build does)."""
    dest = tmp_path / "builds"
    dest.mkdir()
    refused = pytest.raises(BuildError, match=f"another build is running in {re.escape(str(dest))}")
    with FileLock(dest / ".build.lock"), refused:
        build_llama_server(tiny_sdist(tmp_path), dest, TaskState(), backend="cpu")
    assert not (dest / ".build-llama_cpp_python-9.9.9-cpu").exists()
    build = build_llama_server(tiny_sdist(tmp_path / "again"), dest, TaskState(), backend="cpu")  # once it ended
    assert build.executable.is_file()
