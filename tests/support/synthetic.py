"""The service's core in the test's own process (EngineManager, Gateway, the gateway's HTTP server) with engines
that are tests/bench/synthetic_engine.py processes.

Why a synthetic engine: queues, cancellation, the idle TTL, eviction, capacity and remote routing are the
manager's and the gateway's work, not the model's. The synthetic engine is a real local HTTP server speaking the
OpenAI protocol, started and stopped by the real supervisor in its own process, that answers at once (or at a
set pace per token) and starts in a fraction of a second: these tests need neither the 6-minute llama-server
build nor a model's compute, and a slow machine cannot make them flaky."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from app.hub.library import ModelSpec
from app.paths import AppPaths
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.gateway.gateway import Gateway, GatewayConfig
from app.service.gateway.upstream import UpstreamPool
from app.service.http.http_server import HttpServer
from app.service.launch.lifecycle import LifecyclePolicy
from app.service.metrics.request_log import RequestLog
from engines.base import Capabilities, Engine, EngineCommand, Installation, LaunchPlan
from engines.external import ExternalEngine
from engines.supervisor import SupervisorPolicy
from tests.bench.synthetic_engine import MAX_HEADER, SyntheticEngine
from tests.engines.gguf_builder import STRING, gguf_bytes

SYNTHETIC_ENGINE = Path(__file__).parents[1] / "bench" / "synthetic_engine.py"
SYNTHETIC_MODEL = "synth"  # the id the synthetic engine gives itself in its answers and at /v1/models
FAST = SupervisorPolicy(ready_timeout_s=30, ready_poll_s=0.02, stop_grace_s=2, backoff_initial_s=0.05)


class SyntheticEngineAdapter:
    """An engine adapter whose command runs the synthetic engine, pacing each token by `token_delay_ms`."""

    def __init__(self, capabilities: Capabilities, token_delay_ms: float = 0.0, name: str = "synthetic") -> None:
        self.name = name
        self.capabilities = capabilities
        self.token_delay_ms = token_delay_ms

    def detect(self) -> Installation:
        return Installation(True, "0", f"{SYNTHETIC_ENGINE} (synthetic)")

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        argv = (
            sys.executable,
            str(SYNTHETIC_ENGINE),
            "--port",
            str(port),
            "--token-delay-ms",
            str(self.token_delay_ms),
        )
        return EngineCommand(argv)


def model_file(directory: Path, name: str) -> Path:
    """A GGUF header with too few facts for a memory prediction: the manager then counts the model's size in the
    library (ModelSpec.size_bytes), which the test chooses."""
    path = directory / f"{name}.gguf"
    path.write_bytes(gguf_bytes({"general.architecture": (STRING, "llama")}))
    return path


def synthetic_spec(directory: Path, model_id: str, size_bytes: int = 1 << 20, engine: str = "synthetic") -> ModelSpec:
    return ModelSpec(model_id, model_id, model_file(directory, model_id), size_bytes, "test", engine=engine)


@dataclass
class Core:
    """The running core: its manager and gateway, and where the gateway listens."""

    manager: EngineManager
    gateway: Gateway
    log: RequestLog
    url: str  # the OpenAI base URL, with /v1
    openai: openai.AsyncOpenAI  # closed with the core

    def records(self) -> list[dict[str, Any]]:
        return self.log.recent(1000)


def _error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "server_error", "code": status}}).encode()


@contextlib.asynccontextmanager
async def running_core(
    paths: AppPaths,
    specs: list[ModelSpec],
    engines: Mapping[str, Engine],
    lifecycle: LifecyclePolicy | None = None,
    config: GatewayConfig | None = None,
) -> AsyncIterator[Core]:
    """Manager and gateway on a loopback port of this process; every engine stopped on the way out."""
    bus = EventBus()
    engines = {ExternalEngine.name: ExternalEngine(), **engines}  # what remote and --upstream models are served by
    manager = EngineManager({spec.id: spec for spec in specs}, paths, bus, FAST, lifecycle, engines)
    pool, log = UpstreamPool(), RequestLog(paths.requests_db, bus)
    gateway = Gateway(manager, config or GatewayConfig(api_key=None, start_timeout_s=60), pool, log)
    server = HttpServer(gateway, _error_body)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    serving = asyncio.create_task(server.serve_socket(sock))
    idle_stops = asyncio.create_task(manager.stop_idle_engines())
    url = f"http://127.0.0.1:{port}/v1"
    client = openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0)
    try:
        yield Core(manager, gateway, log, url, client)
    finally:
        await client.close()
        idle_stops.cancel()
        server.stop()
        await serving
        with contextlib.suppress(asyncio.CancelledError):
            await idle_stops
        await manager.stop_all()
        await gateway.close()
        pool.close()
        log.close()


@contextlib.asynccontextmanager
async def synthetic_server(token_delay_ms: float = 0.0) -> AsyncIterator[str]:
    """A synthetic engine served from this process (as a remote server stands in for one elsewhere); its base URL."""
    engine = SyntheticEngine(token_delay_ms / 1000.0)
    server = await asyncio.start_server(engine.handle, "127.0.0.1", 0, limit=MAX_HEADER)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()
