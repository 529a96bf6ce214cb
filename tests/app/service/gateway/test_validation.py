"""Request checks: only known fields, right types, sane bounds."""

from __future__ import annotations

from typing import Any

import pytest

from app.service.gateway.openai_fields import check_request
from app.service.gateway.validation import InvalidRequest

CHAT = "/v1/chat/completions"
OBJECT_ARGUMENTS = {"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}


def check(body: Any, route: str = CHAT) -> Any:
    return check_request(route, body, lambda model: 4096)


def test_valid_chat_request() -> None:
    checked = check({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                     "stream_options": {"include_usage": True}, "max_tokens": 10, "temperature": 0.5})  # fmt: skip
    assert (checked.model, checked.stream, checked.include_usage, checked.max_tokens) == ("m", True, True, 10)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([1, 2], None),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}, 5]}, "messages[1]"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{}]}, "tools[0]"),
        ({"model": "m", "messages": [{"role": "user", "content": "x", "name": 5}]}, "messages[0].name"),
        (
            {"model": "m", "messages": [{"role": "assistant", "tool_calls": [OBJECT_ARGUMENTS]}]},
            "messages[0].tool_calls[0].function.arguments",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 1000000}, "n"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 10**9}, "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "grammar_file": "/etc/passwd"}, "grammar_file"),
        ({"model": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
def test_bad_requests_name_the_field(body: Any, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as error:
        check(body)
    assert error.value.param == param


def test_embeddings_and_completions_have_their_own_fields() -> None:
    assert check({"model": "m", "input": ["a", "b"]}, "/v1/embeddings").model == "m"
    with pytest.raises(InvalidRequest):
        check({"model": "m", "input": "a", "messages": []}, "/v1/embeddings")
    with pytest.raises(InvalidRequest):
        check({"model": "m", "prompt": ["a", "b"]}, "/v1/completions")  # one prompt per request
