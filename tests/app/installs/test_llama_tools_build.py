"""The build of llama.cpp's quality tools against a tiny real cmake project with the three targets (seconds, not
the minutes of llama.cpp): one build installs all three where ModelDeck finds them; a missing one is an error.
The real build of the vendored llama.cpp is what the quality tests' fixture makes (tests/app/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.installs.llama_server_build import BuildError
from app.installs.llama_tools_build import (
    TOOLS,
    TOOLS_ENV,
    build_llama_server_and_tools,
    build_llama_tools,
    find_tools,
    installed_tools,
)
from app.task import Progress, TaskState
from engines.llama_server import EXECUTABLE, installed_builds
from tests.support.service import REPO

MAIN_C = "int main(void) { return 0; }\n"


def tiny_tools(root: Path, tools: tuple[str, ...] = TOOLS) -> Path:
    root.mkdir(parents=True)
    lines = ["cmake_minimum_required(VERSION 3.16)", "project(tiny C)", 'option(LLAMA_BUILD_TOOLS "tools" OFF)']
    for name in tools:
        lines += [
            f"add_executable({name} main.c)",
            f"set_target_properties({name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${{CMAKE_BINARY_DIR}}/bin)",
        ]
    lines.append("add_executable(unrelated main.c)")
    (root / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    (root / "main.c").write_text(MAIN_C)
    return root


def test_one_build_installs_the_three_tools_and_they_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOOLS_ENV, raising=False)
    events: list[Progress] = []
    dest = tmp_path / "builds"
    built = build_llama_tools(tiny_tools(tmp_path / "src"), dest, TaskState(events.append, interval_s=0.0),
                              backend="cpu", jobs=2)  # fmt: skip

    assert built.folder.name.startswith("llama-tools-") and built.backend == "cpu"
    assert all((built.folder / name).is_file() for name in TOOLS)
    assert not (built.folder / "unrelated").exists(), "only the three targets are built"
    info = json.loads((built.folder / "build-info.json").read_text())
    assert info["tools"] == list(TOOLS) and "-DLLAMA_BUILD_TOOLS=ON" in info["flags"]
    assert events[-1].finished and events[-1].done == 100
    assert installed_tools(dest) == [built] and find_tools(dest) == built
    assert not list(dest.glob(".build-*")), "the build directory is removed after a success"


def test_the_environment_variable_points_at_tools_of_ones_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "own"
    own.mkdir()
    for name in TOOLS:
        (own / name).write_text("#!/bin/sh\n")
        (own / name).chmod(0o755)
    monkeypatch.setenv(TOOLS_ENV, str(own))
    found = find_tools(tmp_path / "nothing-built")
    assert found is not None and found.folder == own
    (own / "llama-imatrix").unlink()
    assert find_tools(tmp_path / "nothing-built") is None, "a folder without all three tools is not used"


def test_a_source_without_one_of_the_tools_is_an_error(tmp_path: Path) -> None:
    dest = tmp_path / "builds"
    with pytest.raises(BuildError) as failed:
        build_llama_tools(tiny_tools(tmp_path / "src", TOOLS[:2]), dest, TaskState(), backend="cpu", jobs=1)
    assert "llama-imatrix" in str(failed.value)
    assert installed_tools(dest) == []


def test_a_source_that_is_not_llama_cpp_leaves_nothing_in_the_builds_folder(tmp_path: Path) -> None:
    dest = tmp_path / "builds"
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match="neither an sdist"):
        build_llama_tools(tmp_path / "empty", dest, TaskState(), backend="cpu")
    assert [p.name for p in dest.iterdir()] == [".build.lock"]


def test_a_tool_the_build_did_not_make_leaves_no_half_installed_folder(tmp_path: Path) -> None:
    """llama-imatrix here is a target that compiles nothing: the build succeeds, the install finds two tools of
    three."""
    source = tiny_tools(tmp_path / "src", TOOLS[:2])
    with (source / "CMakeLists.txt").open("a") as cmakelists:
        cmakelists.write(f"add_custom_target({TOOLS[2]})\n")
    dest = tmp_path / "builds"
    with pytest.raises(BuildError, match=f"no {TOOLS[2]} is in"):
        build_llama_tools(source, dest, TaskState(), backend="cpu", jobs=1)
    assert installed_tools(dest) == [] and not list(dest.glob(".*.partial"))


def test_engines_build_llama_perplexity_builds_the_tools_with_a_progress_bar(tmp_path: Path) -> None:
    """As a user types it: any of the three names builds all three (one cmake build), and the list shows them."""
    dest = tmp_path / "builds"
    source = tiny_tools(tmp_path / "src")
    env = {k: v for k, v in os.environ.items() if k != TOOLS_ENV}
    built = subprocess.run(
        [sys.executable, "-m", "app", "engines", "build", "llama-perplexity", "--source", str(source), "--dest",
         str(dest), "--backend", "cpu", "--jobs", "2"],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert "[" + "#" * 30 + "] 100.0% done" in built.stderr
    folder = installed_tools(dest)[0].folder
    assert f"built {folder}" in built.stdout


def test_the_server_and_the_tools_come_from_one_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What installers/test.sh builds on a new machine: one configure, one compile, both installed where each is
    found, and the one tree removed."""
    monkeypatch.delenv(TOOLS_ENV, raising=False)
    dest = tmp_path / "builds"
    server, tools = build_llama_server_and_tools(
        tiny_tools(tmp_path / "src", (*TOOLS, EXECUTABLE)), dest, TaskState(), backend="cpu", jobs=2
    )

    assert [b.executable for b in installed_builds(dest)] == [server.executable]
    assert find_tools(dest) == tools and all((tools.folder / name).is_file() for name in TOOLS)
    assert not (tools.folder / EXECUTABLE).exists() and not (server.executable.parent / TOOLS[0]).exists()
    log = next(dest.glob(f"{EXECUTABLE}-*.log")).read_text()
    assert log.count("Configuring done") == 1, "one configure for both"
    assert not list(dest.glob(".build-*")), "the one build directory is removed after a success"
