"""JSON (request bodies, files of ours) parsed with its nesting bounded."""

from __future__ import annotations

import pytest

from app.bounded_json import MAX_DEPTH, BadJson, LoneSurrogate, load_body, load_json


def nested(depth: int) -> bytes:
    return b'{"a": ' * (depth - 1) + b"[]" + b"}" * (depth - 1)


def test_nesting_up_to_the_limit_is_read_and_one_more_level_refused() -> None:
    assert load_json(nested(MAX_DEPTH)) is not None
    with pytest.raises(BadJson, match=f"nested more than {MAX_DEPTH} levels deep"):
        load_json(nested(MAX_DEPTH + 1))


def test_a_body_deeper_than_the_interpreter_can_parse_is_bad_json_not_a_recursion_error() -> None:
    with pytest.raises(BadJson, match="levels deep"):
        load_json(b"[" * 200_000 + b"]" * 200_000)


def test_many_brackets_side_by_side_are_not_depth() -> None:
    body = b'{"messages": [' + b",".join([b'{"role": "user", "content": [{"type": "text"}]}'] * 500) + b"]}"
    assert len(load_json(body)["messages"]) == 500
    assert load_json('{"text": "' + "[" * 1000 + '"}') == {"text": "[" * 1000}


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"NaN-ish", b'{"a": 1}}'])
def test_what_is_not_json_is_bad_json(raw: bytes) -> None:
    with pytest.raises(BadJson):
        load_json(raw)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (rb'{"messages": [{"role": "user", "content": "a\ud800b"}]}', "messages[0].content"),
        (rb'{"messages": [{"content": [{"type": "text", "text": "\uDFFF"}]}]}', "messages[0].content[0].text"),
        (rb'{"prompt": ["ok", "\udc00"]}', "prompt[1]"),
        (rb'{"stop": "\uDbFf"}', "stop"),
        (rb'{"input": {"\ud800": 1}}', "input"),  # in a key
        (rb'{"\ud800": 1}', None),
    ],
)
def test_a_body_with_a_lone_surrogate_is_refused_naming_the_field(body: bytes, param: str | None) -> None:
    with pytest.raises(LoneSurrogate, match="lone UTF-16 surrogate") as refused:
        load_body(body)
    assert refused.value.param == param
    assert load_json(body) is not None  # a file of ours may hold one: only request bodies are refused


def test_a_surrogate_pair_and_an_escaped_backslash_are_text() -> None:
    assert load_body(rb'{"content": "\ud83d\ude00 \uD83D\uDE00"}') == {"content": "\U0001f600 \U0001f600"}
    assert load_body(rb'{"content": "\\ud800"}') == {"content": "\\ud800"}
