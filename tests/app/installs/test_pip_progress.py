"""pip's output lines as pip prints them (copied from `pip install` runs: 23.2 with --progress-bar off, 24.1+
with --progress-bar raw) and the progress steps read from them."""

from __future__ import annotations

from app.installs.pip_progress import PipStep, parse_pip_line, pip_version


def test_steps_from_pip_lines() -> None:
    assert parse_pip_line("Collecting vllm==0.34.0") == PipStep("collecting", "vllm==0.34.0")
    assert parse_pip_line("  Downloading vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl (239.0 MB)") == PipStep(
        "downloading", "vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl", 0, 239_000_000
    )
    assert parse_pip_line("  Downloading https://files.example/p/a-1.0.tar.gz (12 kB)") == PipStep(
        "downloading", "a-1.0.tar.gz", 0, 12_000
    )
    assert parse_pip_line("Progress 1048576 of 239000000") == PipStep("downloading", "", 1_048_576, 239_000_000)
    assert parse_pip_line("Installing collected packages: torch, vllm") == PipStep(
        "installing", "2 packages: torch, vllm"
    )
    assert parse_pip_line("Successfully installed torch-2.14.0 vllm-0.34.0") == PipStep(
        "installed", "torch-2.14.0 vllm-0.34.0"
    )
    for noise in ("", "Requirement already satisfied: six", "WARNING: Retrying", "Progress lots of bytes"):
        assert parse_pip_line(noise) is None


def test_pip_version() -> None:
    assert pip_version("pip 24.2 from /x/site-packages/pip (python 3.11)\n") == (24, 2)
    assert pip_version("not pip") is None
