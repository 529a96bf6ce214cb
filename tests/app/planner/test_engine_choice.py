"""Every known engine scored for a model on the recorded machine profiles of tests/fixtures/hardware, with what
each lacks there. Installations are given as detection results (no engine but llama-cpp-python is installed here)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from app.hardware.profile import HardwareProfile
from app.paths import AppPaths
from app.planner.calibration import CalibrationStore
from app.planner.engine_choice import EngineFit, engine_fits, fit_line
from app.planner.plans import gguf_variant, plan_model
from app.planner.summary import summary_lines
from engines.base import Installation

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"
INSTALLED = Installation(True, "1.0", "installed")
MISSING = Installation(False, None, "not installed")


def machine(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((PROFILES / f"{name}.json").read_text(encoding="utf-8")))


def by_name(fits: tuple[EngineFit, ...]) -> dict[str, EngineFit]:
    return {fit.engine: fit for fit in fits}


def installs(**installed: bool) -> dict[str, Installation]:
    names = ("llama-cpp-python", "llama-server", "vllm", "sglang", "tgi", "trtllm")
    return {name: INSTALLED if installed.get(name.replace("-", "_")) else MISSING for name in names}


def test_serving_a_safetensors_model_on_an_h200_puts_the_batching_engines_first() -> None:
    fits = engine_fits(machine("h200"), {"safetensors"}, 8, installs(vllm=True))
    named = by_name(fits)
    assert fits[0].engine == "vllm" and fits[0].usable and fits[0].lacks == ()
    assert [fit.engine for fit in fits[:3]] == ["vllm", "sglang", "trtllm"]
    assert named["sglang"].lacks == ("not installed: pip install sglang (in an environment of its own)",)
    assert named["sglang"].scores["hardware_fit"] == 5 and named["sglang"].total > 0
    assert named["deepspeed-mii"].notes == ("known to ModelDeck, not launched by it",)
    assert named["deepspeed-mii"].installed is None and not named["deepspeed-mii"].usable
    assert named["llama-cpp-python"].lacks[0] == "needs a gguf model (this one is safetensors)"
    assert named["llama-cpp-python"].total == 0.0


def test_a_laptop_without_gpu_runs_only_llama_cpp() -> None:
    fits = engine_fits(machine("laptop_8core_16gb"), {"gguf"}, 1, installs(llama_cpp_python=True))
    named = by_name(fits)
    assert fits[0].engine in ("llama-cpp-python", "llama-server")
    assert named["llama-cpp-python"].usable
    for engine in ("vllm", "sglang", "tgi", "trtllm", "deepspeed-mii"):
        assert "needs an NVIDIA GPU" in named[engine].lacks and named[engine].total == 0.0
    assert "needs an NVIDIA GPU" not in named["llama-server"].lacks


def test_a_mac_is_told_linux_only_and_an_old_gpu_its_capability() -> None:
    named = by_name(engine_fits(machine("m2max_32gb"), {"safetensors"}, 1, installs()))
    assert named["vllm"].lacks[:2] == ("runs on Linux only", "needs an NVIDIA GPU")
    old_hw = machine("rtx4090_24gb")
    old_gpu = dataclasses.replace(old_hw.gpus[0], name="GeForce GTX 1080", compute_capability=(6, 1))
    old = by_name(engine_fits(dataclasses.replace(old_hw, gpus=(old_gpu,)), {"safetensors"}, 1, installs()))
    assert old["vllm"].lacks[0] == "needs compute capability 7.0 or newer (this GPU has 6.1)"
    assert old["sglang"].scores["hardware_fit"] == 5


def test_one_user_weighs_simplicity_many_users_throughput() -> None:
    both = {"gguf", "safetensors"}
    one = by_name(engine_fits(machine("rtx4090_24gb"), both, 1, installs()))
    many = by_name(engine_fits(machine("rtx4090_24gb"), both, 8, installs()))
    assert one["llama-cpp-python"].total > one["trtllm"].total
    assert many["trtllm"].total > many["llama-cpp-python"].total
    assert many["llama-cpp-python"].notes == ("serves one request at a time",)
    assert "throughput 1" in fit_line(many["llama-cpp-python"])


def test_the_recommendation_carries_the_engines(paths: AppPaths, bundled_gguf: Path) -> None:
    result = plan_model(
        machine("rtx4090_24gb"), "smollm2", [gguf_variant(bundled_gguf)], "serve", 4,
        CalibrationStore(paths.calibration_db),
    )  # fmt: skip
    engines = result.to_dict()["engines"]
    assert {engine["engine"] for engine in engines} >= {"vllm", "sglang", "tgi", "trtllm", "deepspeed-mii"}
    llama = next(engine for engine in engines if engine["engine"] == "llama-cpp-python")
    assert llama["installed"] is True and llama["usable"] is True  # ModelDeck's own engine, detected for real
    lines = summary_lines("smollm2", result)
    start = lines.index("Engines  scored 0-5 for this model here (operations: 5 is the simplest to run)")
    assert any("vLLM" in line and "needs a safetensors model" in line for line in lines[start:])
