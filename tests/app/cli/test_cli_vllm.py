"""`modeldeck vllm-env` as a user runs it. The `vllm` it is pointed at is a two-line script printing a version
(detection only: no vLLM can run on this CPU machine); the install path itself is covered with a real pip run in
test_vllm_env.py."""

from __future__ import annotations

import os
from pathlib import Path

from app.hardware.nvidia import detect_nvidia
from app.installs.vllm_gpu import vllm_gpu_problem
from app.paths import AppPaths
from tests.app.cli.test_cli import modeldeck


def fake_vllm(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "vllm"
    script.write_text(f"#!/bin/sh\necho {version}\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def test_install_without_a_supported_gpu_is_refused_before_anything_is_made(paths: AppPaths, tmp_path: Path) -> None:
    # Offline pip settings: on a machine with a GPU the install is attempted and fails at once, here it is refused.
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path), "PIP_CONFIG_FILE": os.devnull}
    result = modeldeck("vllm-env", "install", "--version", "0.34.0", env=offline)
    assert result.returncode == 2
    problem = vllm_gpu_problem(detect_nvidia())
    if problem is not None:
        assert f"modeldeck: {problem}. Nothing was installed." in result.stderr
        assert problem.startswith("vLLM needs an NVIDIA GPU with compute capability >= 7.0; this machine has")
    else:
        assert "No matching distribution" in result.stderr
    assert not (paths.data / "engines" / "vllm-0.34.0").exists()


def test_use_an_existing_vllm_then_status(paths: AppPaths, tmp_path: Path) -> None:
    script = fake_vllm(tmp_path / "venv" / "bin", "0.34.0")
    used = modeldeck("vllm-env", "use", str(tmp_path / "venv"))
    assert used.returncode == 0, used.stderr
    assert f"ModelDeck now launches vLLM 0.34.0 at {script}" in used.stdout
    status = modeldeck("vllm-env", "status")
    assert status.returncode == 0
    assert f"vLLM 0.34.0 at {script} (yours)" in status.stdout
    missing = modeldeck("vllm-env", "use", str(tmp_path / "nowhere"))
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    assert "The vLLM in use is unchanged: 0.34.0" in missing.stderr


def test_status_without_a_vllm() -> None:
    result = modeldeck("vllm-env", "status")
    assert result.returncode == 1
    assert "No vLLM is registered" in result.stdout


def test_a_record_nested_too_deeply_is_named_in_one_line(paths: AppPaths) -> None:
    """json.loads raised RecursionError on a vllm.json of 100,000 '[', through `vllm-env status` and `engines`."""
    record = paths.data / "engines" / "vllm.json"
    record.parent.mkdir(parents=True)
    record.write_text("[" * 100_000)
    status = modeldeck("vllm-env", "status")
    assert status.returncode == 2
    assert status.stderr.strip() == (
        f"modeldeck: {record} is not a vLLM record (nested more than 64 levels deep); run `modeldeck vllm-env use "
        "PATH` again"
    )
    listed = modeldeck("engines")
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
