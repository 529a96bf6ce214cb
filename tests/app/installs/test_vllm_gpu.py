"""vLLM's hardware gate on the recorded machine profiles of tests/fixtures/hardware (no GPU here to detect)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from app.hardware.detector import GPUDetection
from app.hardware.profile import GPUProblem, HardwareProfile
from app.installs.vllm_gpu import vllm_gpu_problem

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"


def detection(name: str) -> GPUDetection:
    profile = HardwareProfile.from_dict(json.loads((PROFILES / name).read_text(encoding="utf-8")))
    return GPUDetection(gpus=profile.gpus, problems=profile.gpu_problems)


@pytest.mark.parametrize("name", ["h200.json", "rtx4090_24gb.json", "a100_80gb_x2.json"])
def test_supported_nvidia_gpus_pass(name: str) -> None:
    assert vllm_gpu_problem(detection(name)) is None


@pytest.mark.parametrize("name", ["laptop_8core_16gb.json", "m2max_32gb.json"])
def test_machines_without_nvidia_are_refused_plainly(name: str) -> None:
    assert vllm_gpu_problem(detection(name)) == (
        "vLLM needs an NVIDIA GPU with compute capability >= 7.0; this machine has none"
    )


def test_an_old_gpu_is_named_and_a_driver_problem_is_said() -> None:
    gpu = detection("rtx4090_24gb.json").gpus[0]
    old = dataclasses.replace(gpu, name="GeForce GTX 1080", compute_capability=(6, 1))
    assert vllm_gpu_problem(GPUDetection(gpus=(old,))) == (
        "vLLM needs an NVIDIA GPU with compute capability >= 7.0; this machine has GeForce GTX 1080 "
        "(compute capability 6.1)"
    )
    broken = GPUProblem("nvidia", "The NVIDIA driver is not loaded.", "Install it.", "problem", True)
    assert vllm_gpu_problem(GPUDetection(problems=(broken,))) == (
        "vLLM needs an NVIDIA GPU with compute capability >= 7.0; this machine has none "
        "(The NVIDIA driver is not loaded.)"
    )
