"""The engine a model will start on, named before its first start: a start without parameters goes to llama-server
where it is installed, so /api/models and the gateway (which checks and adapts a JIT start's first request for the
route's engine) must say llama-server too, from a detection kept by the manager, never run on the event loop."""

from __future__ import annotations

import json
from pathlib import Path

from app.hardware.profile import HardwareProfile
from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.planner.defaults import DEFAULT_CONTEXT, DEFAULT_SLOTS
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.launch.overrides import PlanOverrides
from engines.base import Installation
from engines.llama_server import LlamaServerEngine
from engines.registry import ENGINES

PROFILES = Path(__file__).resolve().parents[2] / "fixtures" / "hardware"


class CountingServer(LlamaServerEngine):
    """The real adapter, counting its detections (each one runs `llama-server --version`)."""

    def __init__(self, executable: Path) -> None:
        super().__init__(executable)
        self.detections = 0

    def detect(self) -> Installation:
        self.detections += 1
        return super().detect()


def _manager(paths: AppPaths, model: Path, server: LlamaServerEngine) -> EngineManager:
    spec = ModelSpec("smol", "smol.gguf", model, model.stat().st_size, "local")
    profile = json.loads((PROFILES / "h200.json").read_text(encoding="utf-8"))
    return EngineManager(
        {spec.id: spec}, paths, EventBus(), engines={**ENGINES, "llama-server": server},
        hardware=lambda: HardwareProfile.from_dict(profile),
    )  # fmt: skip


async def test_a_never_started_model_names_the_engine_a_start_would_choose(
    paths: AppPaths, bundled_gguf: Path, llama_server_binary: Path
) -> None:
    server = CountingServer(llama_server_binary)
    manager = _manager(paths, bundled_gguf, server)
    await manager.planner.detect_engines()  # what the service does at start-up, on a worker thread
    assert server.detections == 1
    assert manager.describe("smol")["engine"] == "llama-server"
    route = manager.route("smol")
    assert route.engine_name == "llama-server" and route.capabilities.logprobs
    assert manager.context_length("smol") == DEFAULT_CONTEXT * DEFAULT_SLOTS  # a slot may use more when others idle
    for _ in range(50):  # what the gateway and /api/models ask on the event loop: never a detection
        manager.route("smol")
        manager.describe("smol")
    assert server.detections == 1
    # Saved settings naming an engine are what a start without parameters uses.
    manager.planner.model_settings.put("smol", PlanOverrides(engine="llama-cpp-python"))
    assert manager.engine_name("smol") == "llama-cpp-python"
    assert not manager.route("smol").capabilities.logprobs


async def test_without_llama_server_the_library_engine_is_named(
    paths: AppPaths, bundled_gguf: Path, tmp_path: Path
) -> None:
    server = CountingServer(tmp_path / "nowhere" / "llama-server")
    manager = _manager(paths, bundled_gguf, server)
    await manager.planner.detect_engines()
    assert manager.describe("smol")["engine"] == "llama-cpp-python"
    assert manager.context_length("smol") == DEFAULT_CONTEXT


async def test_before_the_first_start_max_tokens_is_bounded_by_what_that_start_would_give(
    paths: AppPaths, bundled_gguf: Path, llama_server_binary: Path, tmp_path: Path
) -> None:
    """A JIT start uses the model's saved settings: a context or slots saved for it widen the bound the gateway
    checks a first request's max_tokens against, as they will once the engine runs; a folder model's context comes
    from its config when it starts, so until then its engine judges."""
    manager = _manager(paths, bundled_gguf, CountingServer(llama_server_binary))
    await manager.planner.detect_engines()
    manager.planner.model_settings.put("smol", PlanOverrides(engine="llama-cpp-python", context=8192))
    assert manager.context_length("smol") == 8192  # not llama-cpp-python's default of DEFAULT_CONTEXT
    manager.planner.model_settings.put("smol", PlanOverrides(parallel=8))
    assert manager.context_length("smol") == DEFAULT_CONTEXT * 8  # one default context per slot, shared
    folder = tmp_path / "folder-model"
    folder.mkdir()
    manager.models["folder"] = ModelSpec("folder", "folder", folder, 0, "local", engine="vllm")  # as a scan adds it
    assert manager.context_length("folder") is None
