"""A start without overrides puts the model's layers on the GPU where the engine's build has a GPU backend.

Found on a real H200 (the GPU acceptance kit): the recommendation said all 33 layers on the GPU, but a start
without overrides (a JIT start, the CLI) ran the 8B model on the CPU at 10 tokens/s instead of about 300. The GPU
cannot exist here: the manager is handed the recorded H200 profile (tests/fixtures/hardware), and the llama-server
is the real CPU build of installers/test.sh copied beside a build-info that says `cuda` (a CPU build accepts `-ngl`
and ignores it, so the engine starts and answers for real)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import app.service.launch.planning as planning_module
from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.planner.defaults import DEFAULT_CONTEXT, DEFAULT_SLOTS
from app.planner.facts import ModelFacts, facts_from_gguf
from app.planner.recommend import gpu_layers_that_fit
from app.service.engines import EngineManager
from app.service.events import EventBus
from engines.gguf import read_gguf_info
from engines.llama_server import BUILD_INFO, LlamaServerEngine
from engines.registry import ENGINES
from engines.states import EngineState

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"


def machine(name: str) -> HardwareProfile:
    return HardwareProfile.from_dict(json.loads((PROFILES / f"{name}.json").read_text(encoding="utf-8")))


def server_build(folder: Path, binary: Path, backend: str) -> LlamaServerEngine:
    """The test llama-server in a build folder of its own whose build-info names `backend`."""
    folder.mkdir(parents=True)
    for item in binary.parent.iterdir():
        if item.is_file() and item.name != BUILD_INFO:
            shutil.copy2(item, folder / item.name)
    info = json.loads((binary.parent / BUILD_INFO).read_text(encoding="utf-8"))
    (folder / BUILD_INFO).write_text(json.dumps({**info, "backend": backend}), encoding="utf-8")
    return LlamaServerEngine(folder / binary.name)


def test_all_layers_fit_an_h200_none_a_laptop_some_a_small_gpu(bundled_gguf: Path) -> None:
    facts = facts_from_gguf(read_gguf_info(bundled_gguf))
    layers = facts.layers or 0
    assert layers > 0
    assert gpu_layers_that_fit(machine("h200"), facts, 4096, 4, server=True) == layers + 1
    assert gpu_layers_that_fit(machine("laptop_8core_16gb"), facts, 4096, 4, server=True) == 0
    # A context whose KV cache outgrows 24 GB: the layers whose cache fits go on the GPU, the rest stay on the CPU.
    partial = gpu_layers_that_fit(machine("rtx4090_24gb"), facts, 2_000_000, 1, server=True)
    assert 0 < partial < layers


@pytest.mark.parametrize(("backend", "offloaded"), [("cuda", True), ("cpu", False)])
async def test_a_start_without_overrides_offloads_where_the_build_can(
    paths: AppPaths, bundled_gguf: Path, llama_server_binary: Path, tmp_path: Path, backend: str, offloaded: bool
) -> None:
    engine = server_build(tmp_path / f"llama-server-0.0.0-{backend}", llama_server_binary, backend)
    spec = ModelSpec("smol", "smol.gguf", bundled_gguf, bundled_gguf.stat().st_size, "local")
    manager = EngineManager(
        {spec.id: spec}, paths, EventBus(), engines={**ENGINES, "llama-server": engine},
        hardware=lambda: machine("h200"),
    )  # fmt: skip
    try:
        assert await manager.start(spec.id) is EngineState.READY
        record = manager.describe(spec.id)
        layers = facts_from_gguf(read_gguf_info(bundled_gguf)).layers or 0
        assert record["engine"] == "llama-server"
        assert record["plan"]["gpu_layers"] == (layers + 1 if offloaded else 0)
        argv = record["launch"]["argv"]
        assert argv[argv.index("-ngl") + 1] == str(record["plan"]["gpu_layers"])
    finally:
        await manager.stop_all()


def test_default_layers_are_fitted_at_the_total_context_of_the_slots(
    paths: AppPaths, bundled_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server's default context is one default context per slot: the layers must fit beside that total. The
    plan is only made (a build-info that says cuda beside an empty file, the recorded H200 asked)."""
    folder = tmp_path / "llama-server-0.0.0-cuda"
    folder.mkdir()
    (folder / "llama-server").write_text("")
    (folder / BUILD_INFO).write_text(json.dumps({"backend": "cuda"}), encoding="utf-8")
    spec = ModelSpec("smol", "smol.gguf", bundled_gguf, bundled_gguf.stat().st_size, "local")
    server, h200 = LlamaServerEngine(folder / "llama-server"), machine("h200")
    manager = EngineManager({spec.id: spec}, paths, EventBus(), engines={**ENGINES, "llama-server": server},
                            hardware=lambda: h200)  # fmt: skip
    asked: list[tuple[int, int]] = []

    def spy(hw: HardwareProfile, facts: ModelFacts, context: int, parallel: int, server: bool) -> int:
        asked.append((context, parallel))
        return gpu_layers_that_fit(hw, facts, context, parallel, server)

    monkeypatch.setattr(planning_module, "gpu_layers_that_fit", spy)
    info = read_gguf_info(bundled_gguf)
    plan = manager.planner.default_gguf_plan(spec.id, info, "llama-server")
    assert plan.context_length == DEFAULT_CONTEXT * DEFAULT_SLOTS and plan.gpu_layers > 0
    eight = manager.planner.default_gguf_plan(spec.id, info, "llama-server", parallel=8)
    assert eight.context_length == DEFAULT_CONTEXT * 8 and eight.parallel == 8
    assert asked == [(DEFAULT_CONTEXT * DEFAULT_SLOTS, DEFAULT_SLOTS), (DEFAULT_CONTEXT * 8, 8)]
