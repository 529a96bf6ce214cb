"""The service reads a vLLM engine's start-up facts from its log lines and shows them in the model listing and on
the event stream. The lines are fed as the supervisor's log sink feeds them (no vLLM can run on this CPU machine);
they come from the fixture written from vLLM 0.34.0's format strings."""

from __future__ import annotations

import asyncio
from pathlib import Path

from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.service.engines import EngineManager
from app.service.events import EventBus

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "logs" / "vllm_startup.log"


def test_vllm_startup_facts_in_listing_and_events(paths: AppPaths, tmp_path: Path) -> None:
    spec = ModelSpec("qwen-7b", "Qwen 7B", tmp_path, 0, "local", engine="vllm")
    other = ModelSpec("small", "Small", tmp_path / "small.gguf", 0, "local")
    bus = EventBus()
    manager = EngineManager({spec.id: spec, other.id: other}, paths, bus)

    async def feed() -> list[dict[str, object]]:
        async with bus.subscribe() as queue:
            for line in FIXTURE.read_text(encoding="utf-8").splitlines():
                manager._on_engine_log(spec.id, line)
                manager._on_engine_log(other.id, line)  # a llama.cpp engine's lines are never read as vLLM's
            return [queue.get_nowait() for _ in range(queue.qsize())]

    events = asyncio.run(feed())
    startups = [event for event in events if event["type"] == "startup"]
    assert [event["model_id"] for event in startups] == ["qwen-7b"] * 4
    assert startups[-1]["kv_cache_tokens"] == 1_982_448
    described = manager.describe(spec.id)["startup"]
    assert described is not None and described["max_concurrency"] == 242.0
    assert manager.describe(other.id)["startup"] is None
