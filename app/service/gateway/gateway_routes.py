"""The routes of the OpenAI endpoint, as method and path pattern: what app.service.gateway.gateway answers, for
clients and tests that walk the API (the fuzz test), so that a route added there is walked too; and what is answered
without an engine: the model list, and why a model could not start."""

from __future__ import annotations

from typing import Any

from app.service.engines import EngineManager
from app.service.http.routes import RoutePattern

PROXIED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
ROUTES: tuple[RoutePattern, ...] = (("GET", "/v1/models"), *(("POST", path) for path in sorted(PROXIED_PATHS)))


def model_list(manager: EngineManager) -> dict[str, Any]:
    """GET /v1/models: every model the service knows, with its state and who serves it."""
    data = []
    for model_id in manager.models:
        remote = manager.remote_of(model_id)
        owner = remote.endpoint.name if remote else "modeldeck"
        data.append({"id": model_id, "object": "model", "created": 0, "owned_by": owner,
                     "state": manager.describe(model_id)["state"]})  # fmt: skip
    return {"object": "list", "data": data}


def start_failure(manager: EngineManager, model: str) -> str:
    """Why the model cannot serve, for a client: what to do, never the engine's log or the model's path
    (the control API and the ModelDeck window show those)."""
    diagnosis = manager.describe(model)["diagnosis"]
    why = f" {diagnosis['summary']} {diagnosis['advice']}" if diagnosis else ""
    return (
        f"The model `{model}` could not be started.{why} The reason and the engine's log are in the ModelDeck "
        f"window, `modeldeck ps` and the control API (GET /api/models/{model}/logs)."
    )
