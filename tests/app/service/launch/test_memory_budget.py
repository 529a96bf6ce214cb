"""A memory budget by default: what was free at start less a margin, from recorded machines and from this one with
the real service; `--max-memory` replaces it; status shows it and the engines are held to it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil

from app.hardware.profile import HardwareProfile
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.launch.memory_budget import GIB, default_budget
from tests.support.service import REPO, start_service_process, stop_service_process

PROFILES = Path(__file__).resolve().parents[3] / "fixtures" / "hardware"


def recorded(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((PROFILES / name).read_text(encoding="utf-8")))


def test_the_default_budget_is_free_ram_and_vram_less_margins() -> None:
    machine = recorded("a100_80gb_x2.json")
    assert len(machine.gpus) == 2 and all(gpu.memory_free is not None for gpu in machine.gpus)
    budget = default_budget(machine)
    ram_margin = max(GIB, machine.ram_total // 10)
    vram = sum((gpu.memory_free or 0) - max(GIB // 2, gpu.memory_total // 20) for gpu in machine.gpus)
    assert budget.bytes == machine.ram_available - ram_margin + vram
    assert "GPU memory" in budget.source and "--max-memory" in budget.source
    laptop = recorded("laptop_8core_16gb.json")
    assert default_budget(laptop).bytes == laptop.ram_available - max(GIB, laptop.ram_total // 10)


def test_unified_memory_is_counted_once_and_unknown_gpu_memory_not_at_all() -> None:
    mac = recorded("m2max_32gb.json")
    assert mac.unified_memory
    assert default_budget(mac).bytes == mac.ram_available - max(GIB, mac.ram_total // 10)
    unknown = replace(recorded("rtx4090_24gb.json"), gpus=tuple(replace(g, memory_free=None) for g in mac.gpus))
    assert default_budget(unknown).bytes == unknown.ram_available - max(GIB, unknown.ram_total // 10)
    starved = replace(mac, ram_available=GIB // 4)
    assert default_budget(starved).bytes == 0  # less free than the margin: nothing may start, not a negative cap


def test_the_service_has_a_budget_by_default_and_holds_the_engines_to_it(paths: AppPaths, tmp_path: Path) -> None:
    available = psutil.virtual_memory().available
    service = start_service_process(paths, tmp_path)
    try:
        budget = service.client.health()["memory_budget"]
        assert budget["bytes"] is not None and "free RAM" in budget["source"]
        # What this machine had free when the service started, less the margin (other helpers' work moves it).
        expected = available - max(GIB, psutil.virtual_memory().total // 10)
        assert abs(budget["bytes"] - expected) < max(GIB, expected // 4), (budget, expected)
        shown = subprocess.run(
            [sys.executable, "-m", "app", "ps"], capture_output=True, text=True, cwd=REPO, timeout=60, check=True
        ).stdout
        assert f"Memory budget of the engines: {budget['bytes'] / 2**20:.0f} MiB" in shown
    finally:
        stop_service_process(service)


def test_max_memory_replaces_the_default_and_a_model_over_it_is_refused(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--max-memory", "64M")
    try:
        assert service.client.health()["memory_budget"] == {"bytes": 64 << 20, "source": "--max-memory"}
        refused = service.client.start_model(BUNDLED_ID, wait=True)
        assert refused["state"] != "ready" and "cap of 64 MiB" in refused["message"], refused
    finally:
        stop_service_process(service)
