"""Ollama's errors on the real service: `{"error": "<sentence>"}` with the status kept, for a missing model, a
wrong key (the gateway's own refusal), a prompt over the context (the core's 400 passed on), `num_ctx` over the
model's context, and hostile bodies sent as raw HTTP (wrong types, bad JSON, deep nesting, huge values): a clear
400, never a 500."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.app.service.dialects.ollama_support import MODEL, endpoint_root, ollama_client
from tests.support.service import RunningService, start_service_process, stop_service_process

HI = [{"role": "user", "content": "Hi"}]
HOSTILE: list[tuple[str, bytes, str]] = [  # path, body, a word the error must hold
    ("/api/chat", b"{not json", "JSON"),
    ("/api/chat", b"[1, 2]", "object"),
    ("/api/chat", json.dumps({"model": 7, "messages": HI}).encode(), "model"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": "Hi"}).encode(), "messages"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": [{"role": "king", "content": "x"}]}).encode(), "role"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": [{"role": "user", "content": 5}]}).encode(), "content"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "stream": "yes"}).encode(), "stream"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "format": "xml"}).encode(), "format"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "options": [1]}).encode(), "options"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "options": {"temperature": "hot"}}).encode(), "temp"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "options": {"num_predict": 1.5}}).encode(), "num_"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "keep_alive": "soon"}).encode(), "keep_alive"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": [{"role": "user", "images": ["%%%"]}]}).encode(), "base64"),
    ("/api/chat", json.dumps({"model": MODEL, "messages": HI, "tools": {"a": 1}}).encode(), "tools"),
    ("/api/chat", b'{"model": "x", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", "JSON"),
    ("/api/generate", json.dumps({"model": MODEL, "prompt": ["a"]}).encode(), "prompt"),
    ("/api/generate", json.dumps({"model": MODEL, "prompt": "a", "raw": True, "format": "json"}).encode(), "format"),
    ("/api/generate", json.dumps({"model": MODEL, "prompt": "a", "think": True}).encode(), "think"),
    ("/api/embed", json.dumps({"model": MODEL, "input": []}).encode(), "input"),
    ("/api/embed", json.dumps({"model": MODEL, "input": [1, 2]}).encode(), "token"),
    ("/api/embeddings", json.dumps({"model": MODEL, "prompt": None}).encode(), "prompt"),
    ("/api/show", json.dumps({"name": MODEL}).encode(), "model"),
]


def post(service: RunningService, path: str, body: bytes, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or service.api_key}", "Content-Type": "application/json"}
    return httpx.post(endpoint_root(service) + path, content=body, headers=headers, timeout=60)


def error_of(answer: httpx.Response) -> str:
    body: Any = answer.json()
    assert isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], str), answer.text
    return body["error"]


def test_refusals_in_ollamas_shape(service: RunningService) -> None:
    with ollama_client(service) as client:
        with pytest.raises(ollama.ResponseError) as missing:
            client.chat(model="llama3.2", messages=HI)
        assert missing.value.status_code == 404 and '"llama3.2" not found' in missing.value.error, missing.value
        assert MODEL in missing.value.error, "the sentence names the models served"

        with pytest.raises(ollama.ResponseError) as too_wide:
            client.chat(model=MODEL, messages=HI, options={"num_ctx": 1_000_000})
        context = service.model()["plan"]["context"]
        assert too_wide.value.status_code == 400 and str(context) in too_wide.value.error, too_wide.value
        narrower = client.chat(model=MODEL, messages=HI, options={"num_ctx": 256, "num_predict": 2, "mirostat": 1})
        assert narrower.done and narrower.eval_count and narrower.eval_count <= 2, narrower

        with pytest.raises(ollama.ResponseError) as too_long:  # the core counts the prompt and refuses it
            client.generate(model=MODEL, prompt="a" + " a" * (context + 100), options={"num_predict": 2})
        assert too_long.value.status_code == 400 and "context" in too_long.value.error, too_long.value

    with ollama_client(service, api_key="wrong-key") as stranger:
        with pytest.raises(ollama.ResponseError) as refused:
            stranger.list()
        assert refused.value.status_code == 401 and "API key" in refused.value.error, refused.value
        with pytest.raises(ollama.ResponseError) as refused_chat:
            stranger.chat(model=MODEL, messages=HI, stream=True).__next__()
        assert refused_chat.value.status_code == 401


def test_hostile_bodies_are_a_clear_400(service: RunningService) -> None:
    for path, body, word in HOSTILE:
        answer = post(service, path, body)
        assert answer.status_code == 400, (path, body[:80], answer.status_code, answer.text)
        assert word.lower() in error_of(answer).lower(), (path, body[:80], answer.text)
    huge = post(service, "/api/chat", b'{"model": "%s", "pad": "%s"}' % (MODEL.encode(), b"x" * (5 << 20)))
    # Refused by the HTTP server itself before any route is known: in its own (OpenAI's) shape.
    assert huge.status_code == 413 and "Request body over" in huge.text, huge.text
    huge_stop = post(service, "/api/chat", json.dumps({"model": MODEL, "messages": HI,
                                                        "options": {"stop": ["x"] * 10_000}}).encode())  # fmt: skip
    assert huge_stop.status_code == 400 and "stop" in error_of(huge_stop), huge_stop.text
    wrong_method = httpx.get(
        endpoint_root(service) + "/api/chat", headers={"Authorization": f"Bearer {service.api_key}"}
    )
    assert wrong_method.status_code == 405 and "POST" in error_of(wrong_method)
    management = post(service, "/api/pull", json.dumps({"model": "llama3.2"}).encode())
    assert management.status_code == 501 and "modeldeck pull" in error_of(management)
    # The bare id is served like its `:latest`; what the service does not serve is a 404 whatever the route.
    assert post(service, "/api/show", json.dumps({"model": BUNDLED_ID}).encode()).status_code == 200
    assert post(service, "/api/embed", json.dumps({"model": "nope", "input": "a"}).encode()).status_code == 404


def test_a_model_that_cannot_start_is_a_503_saying_so(paths: AppPaths, tmp_path: Path, bundled_gguf: Path) -> None:
    """A truncated GGUF beside the bundled model: listed (with no header facts), its start refused, said in Ollama's
    shape; the service keeps serving the other."""
    paths.models_dir.mkdir(parents=True)
    (paths.models_dir / "broken-model.gguf").write_bytes(bundled_gguf.read_bytes()[:1_000_000])
    service = start_service_process(paths, tmp_path)
    try:
        with ollama_client(service) as client:
            listed = {model.model: model for model in client.list().models}
            assert listed["broken-model:latest"].details.format == "", listed
            for ask in (lambda: client.generate(model="broken-model"), lambda: client.chat(model="broken-model",
                        messages=HI, options={"num_predict": 2})):  # fmt: skip
                with pytest.raises(ollama.ResponseError) as refused:
                    ask()
                assert refused.value.status_code == 503 and "could not be started" in refused.value.error, refused
            assert client.generate(model=MODEL, prompt="Hi", options={"num_predict": 2}).response
    finally:
        stop_service_process(service)
