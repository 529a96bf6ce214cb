"""An OpenAI-compatible server that runs on its own: ModelDeck fronts it but never starts or stops it."""

from __future__ import annotations

from engines.base import Capabilities, EngineCommand, Installation, LaunchPlan


class ExternalEngine:
    """No command to build: the server is already running at the model's URL."""

    name = "external"
    capabilities = Capabilities(max_concurrency=1024, stream_usage=True)

    def detect(self) -> Installation:
        return Installation(True, None, "runs outside ModelDeck")

    def build_command(self, plan: LaunchPlan, port: int, api_key: str) -> EngineCommand:
        raise NotImplementedError("external servers are not started by ModelDeck")
