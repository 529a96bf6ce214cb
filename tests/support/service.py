"""Helpers for tests that run the service as a real subprocess (`python -m app serve`), and where the test
engines are. The fixtures that use them are in tests/conftest.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import openai

from app.client import ControlClient, find_service
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths

REPO = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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

    def model(self, model_id: str = BUNDLED_ID) -> dict[str, Any]:
        """The model's record in the service's list (`GET /api/models`)."""
        return cast(dict[str, Any], next(m for m in self.client.models() if m["id"] == model_id))

    def start_on_llama_server(self, parallel: int, model_id: str = BUNDLED_ID) -> dict[str, Any]:
        """Start the model on llama-server with `parallel` slots, and wait until it is ready."""
        overrides: dict[str, int | str] = {"engine": "llama-server", "parallel": parallel}
        started = self.client.start_model(model_id, wait=True, overrides=overrides)
        assert started["state"] == "ready", self.client.logs(model_id)
        return cast(dict[str, Any], started)


StartService = Callable[..., RunningService]  # the llama_server_service fixture: serve arguments in, a service out


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
            state = service.model(model_id)["state"]
            if state in ("ready", "failed"):
                break
            time.sleep(0.1)
    return service


def stop_service_process(service: RunningService) -> None:
    service.client.close()
    for client in service.openai_clients:
        client.close()
    if service.process.poll() is None:
        service.process.terminate()
        service.process.wait(timeout=30)


TEST_ENGINES_ENV = "MODELDECK_TEST_ENGINES"


def test_engines_dir() -> Path:
    """Where installers/test.sh keeps the engines it builds for the tests."""
    configured = os.environ.get(TEST_ENGINES_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "modeldeck" / "test-engines"
