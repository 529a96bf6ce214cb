"""Refusals on Anthropic's Messages routes, against the real service: hostile bodies, the gateway's own refusals
and the core's errors all come back in Anthropic's error shape with a clear status, never a 500, and Anthropic's
client raises the error class its users catch."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService

ASK: Any = [{"role": "user", "content": "Say hello."}]
GOOD: dict[str, Any] = {"model": BUNDLED_ID, "max_tokens": 2, "messages": ASK}
JSON = {"content-type": "application/json"}
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TOOL_USE_OF_A_LIST = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "[]"}]}
IMAGE_URL = {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://10.0.0.1/a.png"}}]}

# A body, and what its 400 must name.
HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"model": BUNDLED_ID, "messages": ASK}, "max_tokens"),
    ({**GOOD, "max_tokens": "5"}, "max_tokens"),
    ({**GOOD, "max_tokens": 0}, "max_tokens"),
    ({**GOOD, "max_tokens": True}, "max_tokens"),
    ({**GOOD, "max_tokens": 2**40}, "max_tokens"),
    ({**GOOD, "messages": []}, "messages"),
    ({**GOOD, "messages": "hello"}, "messages"),
    ({**GOOD, "messages": [{"role": "system", "content": "hi"}]}, "messages.0.role"),
    ({**GOOD, "messages": [{"role": "user", "content": [{"type": "video", "url": "x"}]}]}, "messages.0.content.0.type"),
    ({**GOOD, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages.0.content.0.text"),
    ({**GOOD, "messages": [{"role": "user", "content": "hi", "name": "x"}]}, "messages.0.name"),
    ({**GOOD, "messages": [TOOL_USE_OF_A_LIST]}, "messages.0.content.0.input"),
    ({**GOOD, "frequency_penalty": 1}, "frequency_penalty"),
    ({**GOOD, "thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({**GOOD, "temperature": 1.5}, "temperature"),
    ({**GOOD, "top_k": -1}, "top_k"),
    ({**GOOD, "stop_sequences": "END"}, "stop_sequences"),
    ({**GOOD, "stop_sequences": ["a", "b", "c", "d", "e"]}, "stop_sequences"),
    ({**GOOD, "system": {"text": "x"}}, "system"),
    ({**GOOD, "tools": [{"name": "f"}]}, "tools.0.input_schema"),
    ({**GOOD, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "server tools"),
    ({**GOOD, "tool_choice": {"type": "tool"}}, "tool_choice"),
    ({**GOOD, "tool_choice": "auto"}, "tool_choice"),
    ({**GOOD, "stream": "yes"}, "stream"),
    ({**GOOD, "model": 7}, "model"),
    ({**GOOD, "messages": [IMAGE_URL]}, "not fetched"),
]


def anthropic_error(answer: httpx.Response, status: int, kind: str) -> str:
    """The message of an error answer, checked to be in Anthropic's shape with this status and type."""
    assert answer.status_code == status, (answer.status_code, answer.text)
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    message: str = body["error"]["message"]
    assert isinstance(message, str) and message, body
    return message


def test_hostile_bodies_are_refused_in_anthropic_shape(service: RunningService) -> None:
    base = service.url.removesuffix("/v1")
    headers = {"x-api-key": service.api_key, "anthropic-version": "2023-06-01"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
        for body, named in HOSTILE:
            for path in ("/v1/messages", "/v1/messages/count_tokens"):
                if path.endswith("count_tokens"):  # no max_tokens, sampling or stream fields there
                    body = {name: value for name, value in body.items() if name not in ("max_tokens", "stream")}
                    if body == {"model": BUNDLED_ID, "messages": ASK}:
                        continue
                message = anthropic_error(http.post(path, json=body), 400, "invalid_request_error")
                assert named in message, (path, body, message)
        message = anthropic_error(
            http.post("/v1/messages", content=b'{"model": ', headers=JSON), 400, "invalid_request_error"
        )
        assert "JSON" in message
        deep = b'{"model": "m", "max_tokens": 1, "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        anthropic_error(http.post("/v1/messages", content=deep, headers=JSON), 400,
                        "invalid_request_error")  # fmt: skip
        anthropic_error(http.post("/v1/messages", json=[GOOD]), 400, "invalid_request_error")
        # A body over the limit is refused by the HTTP server itself before any route is known, chunked or not, in
        # OpenAI's shape (the server's own errors have one shape): a 413 all the same.
        huge = json.dumps({**GOOD, "system": "a" * (5 * 1024 * 1024)}).encode()
        assert http.post("/v1/messages", content=huge, headers=JSON).status_code == 413
        plain = {"content-type": "text/plain"}
        anthropic_error(
            http.post("/v1/messages", content=json.dumps(GOOD), headers=plain), 415, "invalid_request_error"
        )
        anthropic_error(http.get("/v1/messages"), 405, "invalid_request_error")
        anthropic_error(http.post("/v1/messages", json=GOOD, headers={"host": "evil.example"}), 403, "permission_error")
        # Documented fields with no local meaning are accepted.
        accepted = {**GOOD, "metadata": {"user_id": "u"}, "service_tier": "auto", "thinking": {"type": "disabled"}}
        answer = http.post("/v1/messages", json=accepted)
        assert answer.status_code == 200 and answer.json()["content"], answer.text


def test_core_errors_in_anthropic_shape(service: RunningService) -> None:
    """The core's refusals keep their status and sentence: an unknown model, a prompt past the context (streamed
    or not), an image for a text-only model."""
    base_url = service.url.removesuffix("/v1")
    with anthropic.Anthropic(base_url=base_url, api_key=service.api_key, max_retries=0, timeout=60) as client:
        with pytest.raises(anthropic.NotFoundError, match="does not exist"):
            client.messages.create(model="no-such-model", max_tokens=2, messages=ASK)
        with pytest.raises(anthropic.NotFoundError, match="does not exist"):
            client.messages.count_tokens(model="no-such-model", messages=ASK)
        context = service.model()["plan"]["context"]
        long: Any = [{"role": "user", "content": "a" + " a" * (context + 50)}]
        for stream in (False, True):
            with pytest.raises(anthropic.BadRequestError, match="maximum context length") as raised:
                client.messages.create(model=BUNDLED_ID, max_tokens=2, messages=long, stream=stream)
            assert raised.value.body["error"]["type"] == "invalid_request_error", raised.value.body  # type: ignore[index]
        image: Any = [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
        ]}]  # fmt: skip
        with pytest.raises(anthropic.BadRequestError, match="text only"):
            client.messages.create(model=BUNDLED_ID, max_tokens=2, messages=image)
        with pytest.raises(anthropic.BadRequestError, match="text only"):
            client.messages.count_tokens(model=BUNDLED_ID, messages=image)
