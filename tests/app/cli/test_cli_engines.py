"""`modeldeck engines` and `modeldeck engines build llama-server` as a user runs them (real subprocesses; the build
is the tiny cmake project laid out as an sdist, see test_llama_server_build)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app import __version__
from app.installs.available import LLAMA_SERVER_ENV
from app.installs.llama_tools_build import TOOLS_PREFIX
from app.paths import AppPaths
from tests.app.installs.test_llama_server_build import (
    PORTABLE_EXTRA,
    cmake_spy,
    cuda_toolkit_layout,
    sdist_of,
    tiny_project,
    tiny_sdist,
    toolkit_probes,
)
from tests.support.service import REPO


def modeldeck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, **(env or {})}, check=False)  # fmt: skip


def test_build_shows_progress_and_the_list_shows_the_build(tmp_path: Path) -> None:
    dest = tmp_path / "builds"
    built = modeldeck("engines", "build", "llama-server", "--source", str(tiny_sdist(tmp_path)), "--dest", str(dest),
                      "--backend", "cpu", "--jobs", "2")  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "[" + "#" * 30 + "] 100.0% done" in built.stderr
    executable = dest / "llama-server-9.9.9-cpu" / "llama-server"
    assert f"built {executable}" in built.stdout

    listed = modeldeck("engines", env={LLAMA_SERVER_ENV: str(executable)})
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"modeldeck {__version__} (commit ")  # which ModelDeck found these engines
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("llama-server "))
    assert "installed" in line and "not installed" not in line and str(executable) in line


def test_a_portable_build_is_for_cuda_without_a_driver_and_asks_cmake_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What installers/build.sh runs: a package's CUDA library loads only where a driver is, so the build machine
    needs none; one command chooses the backend and builds, and cmake is asked about the toolkit once."""
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME"):
        monkeypatch.delenv(name, raising=False)
    spy, calls = cmake_spy(tmp_path / "spy")
    toolkit = cuda_toolkit_layout(tmp_path / "cuda", cublas=True)
    source = sdist_of(tiny_project(tmp_path / "project", extra=PORTABLE_EXTRA), tmp_path)
    dest = tmp_path / "builds"
    path = os.pathsep.join((str(spy), str(toolkit), os.environ["PATH"]))
    built = modeldeck("engines", "build", "llama-server", "--portable", "--source", str(source), "--dest", str(dest),
                      "--jobs", "2", env={"PATH": path})  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert f"backend: CUDA: {toolkit / 'nvcc'}\n" in built.stdout
    assert (dest / "llama-server-9.9.9-cuda-portable" / "llama-server").is_file()
    assert toolkit_probes(calls) == 1


def test_nothing_built_says_how_to_build(tmp_path: Path) -> None:
    listed = modeldeck("engines", env={"PATH": os.path.dirname(os.path.realpath("/bin/sh"))})
    line = next(ln for ln in listed.stdout.splitlines() if ln.startswith("llama-server "))
    assert "not installed" in line and "modeldeck engines build llama-server" in line
    assert "builds in" in listed.stdout and ": none" in listed.stdout


def test_build_records_nested_too_deeply_are_no_builds(paths: AppPaths) -> None:
    """json.loads raised RecursionError on a build-info.json of 100,000 '[', and `engines` printed a traceback."""
    for folder in ("llama-server-9.9.9-cpu", f"{TOOLS_PREFIX}-9.9.9-cpu"):
        (paths.engine_builds / folder).mkdir(parents=True)
        (paths.engine_builds / folder / "build-info.json").write_text("[" * 100_000)
    listed = modeldeck("engines", env={"PATH": os.path.dirname(os.path.realpath("/bin/sh"))})
    assert listed.returncode == 0, listed.stderr
    assert f"llama-server builds in {paths.engine_builds}: none" in listed.stdout
    assert "quality tools (llama-perplexity, llama-quantize, llama-imatrix): not built" in listed.stdout


def test_a_missing_source_is_a_clear_error(tmp_path: Path) -> None:
    built = modeldeck("engines", "build", "llama-server", "--source", str(tmp_path / "nope.tar.gz"), "--backend", "cpu")
    assert built.returncode == 2
    assert "nope.tar.gz does not exist" in built.stderr


def test_a_damaged_source_is_a_clear_error(tmp_path: Path) -> None:
    whole = tiny_sdist(tmp_path).read_bytes()
    damaged = tmp_path / "llama_cpp_python-9.9.8.tar.gz"
    damaged.write_bytes(whole[: len(whole) // 2])
    built = modeldeck("engines", "build", "llama-server", "--source", str(damaged), "--dest", str(tmp_path / "out"),
                      "--backend", "cpu")  # fmt: skip
    assert built.returncode == 1
    assert f"{damaged} is not a whole .tar.gz" in built.stderr and "Traceback" not in built.stderr
