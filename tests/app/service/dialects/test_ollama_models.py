"""Ollama's model listings and embeddings on the real service, read by the official `ollama` client's own types:
/api/tags, /api/show, /api/ps, /api/version, /api/embed and the older /api/embeddings; and keep_alive's load and
unload requests (a prompt-less generate, keep_alive 0)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx

from app.hub.library import BUNDLED_ID
from tests.app.service.dialects.ollama_support import MODEL, endpoint_root, ollama_client
from tests.support.service import RunningService
from tests.support.waiting import wait_for


def test_tags_show_ps_and_version(service: RunningService) -> None:
    with ollama_client(service) as client:
        listed = client.list()
        shown = client.show(BUNDLED_ID)  # the bare id is the same model as its `:latest`
        loaded = client.ps()
    (model,) = listed.models
    assert model.model == MODEL and model.size == service.model()["size_bytes"], model
    assert model.digest is not None and re.fullmatch(r"[0-9a-f]{64}", model.digest), model
    assert model.modified_at is not None and model.modified_at < datetime.now(UTC), model
    details = model.details
    assert details is not None and details.format == "gguf" and details.family == "llama", details
    assert details.parameter_size == "135M" and details.quantization_level == "Q4_1", details

    assert shown.details == details and shown.capabilities == ["completion", "embedding"], shown
    assert shown.modelinfo is not None and shown.modelinfo["llama.context_length"] == 8192, shown.modelinfo
    assert shown.modelinfo["general.parameter_count"] > 100_000_000, shown.modelinfo
    assert shown.template and "<|im_start|>" in shown.template, shown.template
    context = service.model()["plan"]["context"]
    assert shown.parameters == f"num_ctx {context}", shown.parameters

    (running,) = loaded.models
    assert running.model == MODEL and running.context_length == context, running
    assert running.size and running.size > 0 and running.expires_at is not None, running
    assert running.expires_at.year > 2100, running  # no idle TTL: loaded for good, as Ollama writes it

    answer = httpx.get(endpoint_root(service) + "/api/version", headers={"Authorization": f"Bearer {service.api_key}"})
    assert answer.status_code == 200 and re.fullmatch(r"\d+\.\d+\.\d+", answer.json()["version"]), answer.text
    root = httpx.get(endpoint_root(service) + "/", headers={"Authorization": f"Bearer {service.api_key}"})
    assert root.status_code == 200 and root.text == "Ollama is running"


def test_embed_and_the_older_embeddings(service: RunningService) -> None:
    with ollama_client(service) as client:
        size = client.show(MODEL).modelinfo["llama.embedding_length"]
        one = client.embed(model=MODEL, input="The sky is blue")
        two = client.embed(model=MODEL, input=["first text", "a second, longer text"])
        old = client.embeddings(model=MODEL, prompt="The sky is blue")
    assert size == 576 and [len(vector) for vector in one.embeddings] == [size], one
    assert [len(vector) for vector in two.embeddings] == [size, size] and two.embeddings[0] != two.embeddings[1]
    assert two.prompt_eval_count and two.prompt_eval_count > one.prompt_eval_count, (one, two)
    assert two.total_duration and two.total_duration > 0, two
    assert list(old.embedding) == list(one.embeddings[0]), "the same text, the same vector"


def test_keep_alive_loads_and_unloads(service: RunningService) -> None:
    """Ollama's `ollama stop`: a request without a prompt and keep_alive 0 unloads the model; without keep_alive it
    loads it again (the load measured); after an answer with keep_alive 0 the model is unloaded too."""
    with ollama_client(service) as client:
        unloaded = client.generate(model=MODEL, keep_alive=0)
        assert unloaded.done and unloaded.done_reason == "unload", unloaded
        assert service.model()["state"] == "stopped" and client.ps().models == []
        loaded = client.generate(model=MODEL)
        assert loaded.done_reason == "load" and loaded.load_duration and loaded.load_duration > 0, loaded
        assert service.model()["state"] == "ready" and len(client.ps().models) == 1
        answered = client.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], keep_alive="0s",
                               options={"num_predict": 2})  # fmt: skip
        assert answered.message.content, answered
        wait_for(lambda: service.model()["state"] == "stopped", 30, "the model unloaded after its answer")
        again = client.chat(model=MODEL, messages=[{"role": "user", "content": "Hi"}], keep_alive="5m",
                            options={"num_predict": 2})  # fmt: skip
    assert again.load_duration and again.load_duration > 0 and again.message.content, again
