"""The Responses API's refusals against the real service: hostile or wrong bodies are a 400 (413 when too large) in
OpenAI's error shape naming the field, never a 500; fields with no local meaning are accepted, those that ask for
something ModelDeck has not are refused saying why; a prompt over the context is the core's 400, passed on."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from app.hub.library import BUNDLED_ID
from tests.support.service import RunningService

ASK = {"model": BUNDLED_ID, "input": "Hi", "max_output_tokens": 2}
# (body, the field the error names, words its message holds)
REFUSED: list[tuple[dict[str, Any], str | None, str]] = [
    ({**ASK, "bogus": 1}, "bogus", "Unknown field"),
    ({"input": "Hi"}, "model", "required"),
    ({"model": BUNDLED_ID}, "input", "required"),
    ({**ASK, "input": 5}, "input", "string"),
    ({**ASK, "input": []}, "input", "non-empty"),
    ({**ASK, "input": [{"role": "robot", "content": "x"}]}, "input[0].role", "must be one of"),
    ({**ASK, "input": [{"role": "user", "content": {"text": "x"}}]}, "input[0].content", "array of content"),
    ({**ASK, "input": [{"role": "user", "content": [{"type": "input_text", "text": 3}]}]}, "input[0].content[0].text",
     "string"),
    ({**ASK, "input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output", "string"),
    ({**ASK, "input": [{"type": "function_call", "call_id": "c", "name": "f"}]}, "input[0].arguments", "string"),
    ({**ASK, "input": [{"type": "computer_call_output"}]}, "input[0].type", "not an input item"),
    ({**ASK, "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://10.0.0.1/x.png"}]}]},
     "input[0].content[0].image_url", "data: URL"),
    ({**ASK, "tools": [{"type": "web_search"}]}, "tools[0]", "none locally"),
    ({**ASK, "tools": [{"type": "function"}]}, "tools[0].name", "non-empty"),
    ({**ASK, "tools": [{"type": "function", "name": "f", "parameters": "x"}]}, "tools[0].parameters", "JSON Schema"),
    ({**ASK, "tool_choice": {"type": "file_search"}}, "tool_choice", "none locally"),
    ({**ASK, "tool_choice": {"type": "function", "name": ""}}, "tool_choice", "must be"),
    ({**ASK, "max_output_tokens": 2**40}, "max_output_tokens", "whole number"),
    ({**ASK, "max_output_tokens": "12"}, "max_output_tokens", "whole number"),
    ({**ASK, "temperature": "hot"}, "temperature", "number"),
    ({**ASK, "metadata": {"a": 1}}, "metadata", "strings"),
    ({**ASK, "text": {"format": {"type": "json_schema"}}}, "text.format", "schema"),
    ({**ASK, "text": {"format": {"type": "yaml"}}}, "text.format", "json_object"),
    ({**ASK, "truncation": "auto"}, "truncation", "never drops"),
    ({**ASK, "include": ["reasoning.encrypted_content"]}, "include", "must be empty"),
    ({**ASK, "background": True}, "background", "foreground"),
    ({**ASK, "conversation": "conv_1"}, "conversation", "previous_response_id"),
    ({**ASK, "previous_response_id": 5}, "previous_response_id", "string"),
    ({**ASK, "stream": "yes"}, "stream", "true or false"),
]  # fmt: skip


def test_hostile_and_refused_bodies(service: RunningService) -> None:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    with httpx.Client(base_url=service.url, headers=headers, timeout=30) as http:
        for body, param, words in REFUSED:
            answer = http.post("/responses", json=body)
            assert answer.status_code == 400, (body, answer.text)
            error = answer.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == param, (body, error)
            assert words in error["message"], (body, error)
        raw = [
            b"{not json",
            b"[1, 2]",
            b'{"metadata": ' + b'{"a": ' * 200 + b"1" + b"}" * 200 + b"}",
            b'{"input": ' + b"[" * 200 + b"]" * 200 + b"}",
        ]
        for content in raw:
            answer = http.post("/responses", content=content, headers={"content-type": "application/json"})
            assert answer.status_code == 400, (content[:40], answer.text)
            assert answer.json()["error"]["type"] == "invalid_request_error"
        huge = http.post("/responses", content=b'{"input": "' + b"x" * (5 << 20) + b'"}',
                         headers={"content-type": "application/json"})  # fmt: skip
        assert huge.status_code == 413 and "over" in huge.json()["error"]["message"]
        assert http.post("/responses", content=b"{}", headers={"content-type": "text/plain"}).status_code == 415
        assert http.get("/responses").status_code == 405
        assert http.put("/responses/resp_1", json={}).status_code == 405
        assert http.get("/responses/resp_1/input_items").status_code == 404
        assert http.get("/responses/resp_1/other").status_code == 404
        stored = http.post("/responses", json=ASK).json()["id"]
        for query, param in (("limit=0", "limit"), ("limit=x", "limit"), ("order=up", "order"),
                             ("after=msg_nothing", "after"), ("bogus=1", "bogus")):  # fmt: skip
            listed = http.get(f"/responses/{stored}/input_items?{query}")
            assert listed.status_code == 400 and listed.json()["error"]["param"] == param, (query, listed.text)
        assert http.post(f"/responses/{stored}/input_items", json={}).status_code == 405
        unknown = http.get("/responses/resp_nothing")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
        keyless = httpx.post(f"{service.url}/responses", json=ASK, timeout=30)
        assert keyless.status_code == 401 and keyless.json()["error"]["type"] == "authentication_error"


def test_ignored_fields_and_context_overflow(service: RunningService) -> None:
    client = service.openai_client()
    reply = client.responses.create(
        model=BUNDLED_ID, input="Hi", max_output_tokens=2, reasoning={"effort": "low"}, truncation="disabled",
        service_tier="auto", parallel_tool_calls=False, prompt_cache_key="k", safety_identifier="s", include=[],
        user="u", top_p=0.9, temperature=0.5,
    )  # fmt: skip
    assert reply.output_text and reply.parallel_tool_calls is False and reply.temperature == 0.5
    with pytest.raises(openai.BadRequestError, match="bogus") as unknown:
        client.responses.create(model=BUNDLED_ID, input="Hi", extra_body={"bogus": True})
    assert unknown.value.body["param"] == "bogus"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as overflow:
        client.responses.create(model=BUNDLED_ID, input="word " * 40_000, max_output_tokens=2)
    assert overflow.value.code == "context_length_exceeded", overflow.value.body
    with pytest.raises(openai.BadRequestError) as streamed:
        list(client.responses.create(model=BUNDLED_ID, input="word " * 40_000, max_output_tokens=2, stream=True))
    assert streamed.value.code == "context_length_exceeded"
    with pytest.raises(openai.NotFoundError) as unknown_model:
        client.responses.create(model="no-such-model", input="Hi")
    assert "no-such-model" in unknown_model.value.message
