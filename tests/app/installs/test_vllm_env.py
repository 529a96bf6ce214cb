"""The managed vLLM environment, driven for real: `python -m venv`, `pip install` and `vllm --version` run as they
would for the user, but pip installs a tiny wheel named `vllm` built here (tests/support/fake_wheel.py) from a local
folder with `--no-index`, instead of vLLM's 2 GB CUDA wheel and its torch, which neither fit nor run on this
CPU-only machine. Creation, progress, verification, cancel and failures are all real."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.installs.vllm_env import (
    VERIFIED_MARKER,
    InstallError,
    VLLMInstall,
    configured_engines,
    env_dir,
    install_vllm,
    register,
    registered,
    registration_file,
    use_existing,
)
from app.paths import AppPaths
from app.task import Progress, Stopped, TaskState
from engines.base import LaunchPlan
from tests.support.fake_wheel import build_wheel

OFFLINE_ENV = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    directory = tmp_path / "wheels"
    build_wheel(directory, "vllm", "0.0.0", "vllm")
    build_wheel(directory, "vllm", "0.0.7", "vllm", prints="0.0.6")  # a build that lies about its version
    return directory


def install(paths: AppPaths, version: str, wheels: Path, task: TaskState) -> VLLMInstall:
    return install_vllm(paths, version, task, pip_args=["--no-index", "--find-links", str(wheels)], env=OFFLINE_ENV)


def test_install_creates_verifies_and_registers_with_progress(paths: AppPaths, wheels: Path) -> None:
    seen: list[Progress] = []
    result = install(paths, "0.0.0", wheels, TaskState(seen.append, interval_s=0))
    target = env_dir(paths, "0.0.0")
    assert result == VLLMInstall(target / "bin" / "vllm", "0.0.0", managed=True)
    assert (target / VERIFIED_MARKER).read_text(encoding="utf-8") == "0.0.0"
    assert registered(paths) == result
    steps = [p.current for p in seen]
    assert steps[0].startswith("creating the environment")
    assert "collecting vllm-0.0.0-py3-none-any.whl" in steps  # pip says "Processing" for a local wheel
    assert any(step.startswith("installing 1 packages: vllm") for step in steps)
    assert any(step.startswith("verifying") for step in steps)
    assert seen[-1].finished
    # A verified environment is reused, not rebuilt.
    again = TaskState(seen.append, interval_s=0)
    before = len(seen)
    assert install(paths, "0.0.0", wheels, again) == result
    assert not any(p.current.startswith("creating") for p in seen[before:])


def test_cancel_stops_pip_and_removes_the_new_environment(paths: AppPaths, wheels: Path) -> None:
    earlier = VLLMInstall(Path("/opt/vllm/bin/vllm"), "0.33.0", managed=False)
    register(paths, earlier)
    task = TaskState(interval_s=0)

    def cancel_when_pip_starts(progress: Progress) -> None:
        if progress.current.startswith("collecting"):
            task.cancel()

    task._on_progress = cancel_when_pip_starts
    with pytest.raises(Stopped):
        install(paths, "0.0.0", wheels, task)
    assert not env_dir(paths, "0.0.0").exists()
    assert registered(paths) == earlier  # the installation in use is untouched


def test_a_version_pip_cannot_find_fails_with_its_reason(paths: AppPaths, wheels: Path) -> None:
    with pytest.raises(InstallError, match=r"(?s)pip install vllm==9\.9\.9 failed.*No matching distribution"):
        install(paths, "9.9.9", wheels, TaskState())
    assert not env_dir(paths, "9.9.9").exists()
    assert registered(paths) is None


def test_an_install_that_reports_another_version_is_refused(paths: AppPaths, wheels: Path) -> None:
    with pytest.raises(InstallError, match=r"reports version 0\.0\.6, not 0\.0\.7"):
        install(paths, "0.0.7", wheels, TaskState())
    assert not env_dir(paths, "0.0.7").exists()


def test_leftover_of_a_failed_install_is_replaced(paths: AppPaths, wheels: Path) -> None:
    leftover = env_dir(paths, "0.0.0")
    leftover.mkdir(parents=True)
    (leftover / "half-written").write_text("x", encoding="utf-8")
    install(paths, "0.0.0", wheels, TaskState())
    assert not (leftover / "half-written").exists() and (leftover / VERIFIED_MARKER).is_file()


def test_use_existing_environment_or_executable(paths: AppPaths, wheels: Path, tmp_path: Path) -> None:
    managed = install(paths, "0.0.0", wheels, TaskState())
    by_folder = use_existing(paths, env_dir(paths, "0.0.0"))
    assert by_folder == VLLMInstall(managed.executable, "0.0.0", managed=False)
    assert use_existing(paths, managed.executable) == by_folder
    assert json.loads(registration_file(paths).read_text(encoding="utf-8"))["managed"] is False
    with pytest.raises(InstallError, match="not a vLLM environment"):
        use_existing(paths, tmp_path)
    with pytest.raises(InstallError, match="does not exist"):
        use_existing(paths, tmp_path / "nowhere" / "vllm")
    broken = tmp_path / "vllm"
    broken.write_text("#!/bin/sh\necho 'no CUDA' >&2\nexit 3\n", encoding="utf-8")
    broken.chmod(0o755)
    with pytest.raises(InstallError, match=r"(?s)exited with 3.*no CUDA"):
        use_existing(paths, broken)
    assert registered(paths) == by_folder  # refused paths change nothing


def test_unreadable_registration_is_reported_and_kept(paths: AppPaths) -> None:
    registration_file(paths).parent.mkdir(parents=True)
    registration_file(paths).write_text("{not json", encoding="utf-8")
    with pytest.raises(InstallError, match="is not a vLLM record"):
        registered(paths)
    assert registration_file(paths).read_text(encoding="utf-8") == "{not json"


def test_the_registered_vllm_is_the_one_the_service_launches(paths: AppPaths, tmp_path: Path) -> None:
    assert configured_engines(paths) == {}
    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\necho 0.34.0\n", encoding="utf-8")  # detection only
    script.chmod(0o755)
    use_existing(paths, script)
    engine = configured_engines(paths)["vllm"]
    assert engine.detect().version == "0.34.0"
    plan = LaunchPlan("m", Path("/models/m"), 4096, 0, model_ref="org/m")
    assert engine.build_command(plan, 8000, "key").argv[:2] == (str(script), "serve")
