"""The `modeldeck` command as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from app.hub.library import BUNDLED_ID
from tests.support.service import REPO, RunningService, free_port


def modeldeck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_key_prints_the_same_key_twice() -> None:
    first, second = modeldeck("key"), modeldeck("key")
    assert first.returncode == 0
    assert first.stdout.strip() and first.stdout == second.stdout
    assert "no OS keyring is available" in first.stderr


def test_models_lists_the_bundled_model() -> None:
    result = modeldeck("models")
    assert result.returncode == 0
    assert BUNDLED_ID in result.stdout and "stopped" in result.stdout


def test_ps_without_service_says_so() -> None:
    result = modeldeck("ps")
    assert result.returncode == 1
    assert "not running" in result.stdout


def test_ps_and_models_with_running_service(service: RunningService) -> None:
    ps = modeldeck("ps")
    assert ps.returncode == 0
    pid = service.model()["pid"]
    assert BUNDLED_ID in ps.stdout and "ready" in ps.stdout and str(pid) in ps.stdout
    assert "MiB at load, predicted" in ps.stdout  # the service checked its memory prediction at load
    assert "ready" in modeldeck("models").stdout


def test_serve_refuses_a_bad_model_ttl() -> None:
    for value in ("second=soon", "second=0", "=5"):
        result = modeldeck("serve", "--model-ttl", value)
        assert result.returncode == 2
        assert "expected ID=SECONDS" in result.stderr


def test_serve_refuses_a_ttl_for_an_upstream_model() -> None:
    result = modeldeck(
        "serve", "--port", str(free_port()), "--upstream", "far=http://127.0.0.1:9/v1", "--model-ttl", "far=5",
        env={"MODELDECK_API_KEY": "k"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "--model-ttl far: an --upstream model is not started or stopped by ModelDeck" in result.stderr


def test_serve_refuses_a_ttl_for_an_unknown_model() -> None:
    result = modeldeck("serve", "--port", str(free_port()), "--model-ttl", "nope=5", env={"MODELDECK_API_KEY": "k"})
    assert result.returncode == 2
    assert "Unknown model nope" in result.stderr
