"""`modeldeck serve --ollama-port N`: Ollama's API alone on a loopback port of its own, with the endpoint's key (or,
by the explicit --ollama-no-key, none), the Host check kept either way, and web pages kept out of the keyless one."""

from __future__ import annotations

from pathlib import Path

import httpx
import ollama
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.app.service.dialects.ollama_support import MODEL
from tests.support.service import free_port, start_service_process, stop_service_process

HI = [{"role": "user", "content": "Hi"}]


def test_the_ollama_port_asks_the_key_and_serves_only_ollamas_api(paths: AppPaths, tmp_path: Path) -> None:
    port = free_port()
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--ollama-port", str(port))
    root = f"http://127.0.0.1:{port}"
    try:
        client = ollama.Client(host=root, headers={"Authorization": f"Bearer {service.api_key}"}, timeout=60)
        stranger = ollama.Client(host=root, timeout=60)
        try:
            answer = client.chat(model=MODEL, messages=HI, options={"num_predict": 3})
            assert answer.message.content and answer.eval_count and answer.eval_count <= 3, answer
            assert [model.model for model in client.list().models] == [MODEL]
            with pytest.raises(ollama.ResponseError) as refused:
                stranger.list()
            assert refused.value.status_code == 401 and "API key" in refused.value.error
        finally:
            client.close()
            stranger.close()
        headers = {"Authorization": f"Bearer {service.api_key}"}
        openai_route = httpx.get(f"{root}/v1/models", headers=headers)
        assert openai_route.status_code == 404 and "Ollama" in openai_route.json()["error"], openai_route.text
        rebinding = httpx.get(f"{root}/api/tags", headers={**headers, "Host": "evil.example:11434"})
        assert rebinding.status_code == 403 and rebinding.json() == {"error": "Host not allowed."}
        assert f"Ollama's API alone on http://127.0.0.1:{port} (API key: the endpoint's)" in service.output()
    finally:
        stop_service_process(service)


def test_the_keyless_ollama_port_is_an_explicit_choice(paths: AppPaths, tmp_path: Path) -> None:
    port = free_port()
    service = start_service_process(paths, tmp_path, "--ollama-port", str(port), "--ollama-no-key")
    root = f"http://127.0.0.1:{port}"
    try:
        client = ollama.Client(host=root, timeout=60)
        try:
            assert [model.model for model in client.list().models] == [MODEL]
        finally:
            client.close()
        # A web page's form POST needs no CORS preflight: refused, so that a page cannot use the models.
        form = httpx.post(f"{root}/api/generate", content=b'{"model": "%s"}' % MODEL.encode(),
                          headers={"Origin": "http://evil.example", "Content-Type": "text/plain"})  # fmt: skip
        assert form.status_code == 415 and "application/json" in form.json()["error"], form.text
        rebinding = httpx.get(f"{root}/api/tags", headers={"Host": "evil.example"})
        assert rebinding.status_code == 403
        # The endpoint itself still asks its key.
        assert httpx.get(service.url.removesuffix("/v1") + "/api/tags").status_code == 401
    finally:
        stop_service_process(service)
