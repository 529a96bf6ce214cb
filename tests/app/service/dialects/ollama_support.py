"""The official `ollama` client pointed at a running service's endpoint, for the Ollama dialect's tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import ollama

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService

MODEL = f"{BUNDLED_ID}:latest"  # as /api/tags lists it


def endpoint_root(service: RunningService) -> str:
    """The endpoint's root, where Ollama's API answers (the OpenAI one is under /v1)."""
    return service.url.removesuffix("/v1")


@contextmanager
def ollama_client(service: RunningService, api_key: str | None = None) -> Iterator[ollama.Client]:
    """The official client with the service's key (or `api_key`), closed after use."""
    headers = {"Authorization": f"Bearer {api_key or service.api_key}"}
    client = ollama.Client(host=endpoint_root(service), headers=headers, timeout=120)
    try:
        yield client
    finally:
        client.close()
