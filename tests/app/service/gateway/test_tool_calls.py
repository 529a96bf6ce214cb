"""Tool calls read out of recorded model text, whole and cut anywhere, and requests said for each engine
(app.service.gateway.tool_calls, tool_text, tool_stream), without an engine."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.service.gateway.tool_calls import ToolPlan, plan_tools, rewrite_answer
from app.service.gateway.tool_stream import ToolStream
from app.service.gateway.tool_text import CallStart, ForcedCall, HermesCalls, Piece
from app.service.gateway.validation import InvalidRequest

WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
CLOCK = {"type": "function", "function": {"name": "clock"}}
SMOLLM2 = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] }}{% endfor %}"
HERMES_TEMPLATE = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.tool_calls }}{% endfor %}"
# Recorded: what the bundled model wrote, few-shot, at temperature 0, and under the forced schema on each engine
TWO_CALLS = (
    'Sure. <tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>\n'
    '<tool_call>{"name": "weather", "arguments": {"city": "Rome"}}</tool_call>'
)
FORCED = ['{"name" :"clock","arguments" : {"zone" :"CET"}}', '{\n  "name": "weather",\n  "arguments": {\n    "city": '
          '"Pa\\"ris}"\n  }\n}']  # fmt: skip


def ask(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER, CLOCK], **fields}


def assembled(pieces: list[Piece]) -> tuple[str, list[tuple[str, str]]]:
    text, calls = "", []
    for piece in pieces:
        if isinstance(piece, CallStart):
            assert piece.index == len(calls) and piece.id.startswith("call_")
            calls.append((piece.name, ""))
        elif piece.call is not None:
            calls[piece.call] = (calls[piece.call][0], calls[piece.call][1] + piece.text)
        else:
            text += piece.text
    return text, calls


@pytest.mark.parametrize("recorded", FORCED)
def test_a_forced_call_reads_the_same_cut_anywhere(recorded: str) -> None:
    whole = json.loads(recorded)
    for cut in range(len(recorded) + 1):
        read = ForcedCall()
        text, calls = assembled([*read.feed(recorded[:cut]), *read.feed(recorded[cut:]), *read.flush()])
        assert text == ""
        assert [(name, json.loads(arguments)) for name, arguments in calls] == [(whole["name"], whole["arguments"])]


def test_a_forced_call_the_model_did_not_finish_is_text() -> None:
    read = ForcedCall()
    assert assembled([*read.feed('{"nam'), *read.flush()]) == ('{"nam', [])


def test_hermes_calls_cut_anywhere_give_text_and_calls() -> None:
    for cut in range(len(TWO_CALLS) + 1):
        read = HermesCalls(frozenset({"weather"}), parallel=True)
        text, calls = assembled([*read.feed(TWO_CALLS[:cut]), *read.feed(TWO_CALLS[cut:]), *read.flush()])
        assert text == "Sure."
        assert [(name, json.loads(arguments)) for name, arguments in calls] == [
            ("weather", {"city": "Paris"}), ("weather", {"city": "Rome"})]  # fmt: skip


def test_hermes_calls_without_parallel_keep_the_first() -> None:
    read = HermesCalls(frozenset({"weather"}), parallel=False)
    assert len(assembled([*read.feed(TWO_CALLS), *read.flush()])[1]) == 1


@pytest.mark.parametrize(
    "written",
    ['<tool_call>{"name": "other", "arguments": {}}</tool_call>', "<tool_call>not json</tool_call>", "a < b <tool"],
)
def test_what_is_not_a_call_to_an_offered_tool_stays_text(written: str) -> None:
    read = HermesCalls(frozenset({"weather"}), parallel=True)
    assert assembled([*read.feed(written), *read.flush()]) == (written, [])


def test_a_call_left_open_at_the_end_is_read() -> None:
    read = HermesCalls(frozenset({"weather"}), parallel=True)
    pieces = [*read.feed('<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}'), *read.flush()]
    assert assembled(pieces)[1] == [("weather", '{"city": "Oslo"}')]


def test_required_becomes_a_schema_over_the_offered_tools() -> None:
    payload = ask(tool_choice="required", parallel_tool_calls=True)
    plan = plan_tools("llama-cpp-python", SMOLLM2, payload)
    assert plan == ToolPlan("forced", frozenset({"weather", "clock"}), parallel=False)
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(payload)
    options = payload["response_format"]["json_schema"]["schema"]["anyOf"]
    assert [option["properties"]["name"] for option in options] == [{"const": "weather"}, {"const": "clock"}]
    assert options[0]["properties"]["arguments"] == WEATHER["function"]["parameters"]  # type: ignore[index]
    assert options[1]["properties"]["arguments"] == {"type": "object"}
    assert payload["messages"][0]["role"] == "system" and "weather" in payload["messages"][0]["content"]


def test_a_named_function_allows_that_one_only() -> None:
    payload = ask(tool_choice={"type": "function", "function": {"name": "clock"}})
    plan_tools("llama-server", SMOLLM2, payload)
    assert payload["response_format"]["json_schema"]["schema"]["properties"]["name"] == {"const": "clock"}


def test_a_named_function_not_offered_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="`nowhere`") as refused:
        plan_tools("llama-server", SMOLLM2, ask(tool_choice={"type": "function", "function": {"name": "nowhere"}}))
    assert refused.value.param == "tool_choice"


def test_none_offers_no_tools() -> None:
    payload = ask(tool_choice="none", parallel_tool_calls=False)
    assert plan_tools("llama-cpp-python", SMOLLM2, payload) is None
    assert payload == {"model": "m", "messages": [{"role": "user", "content": "Weather?"}]}


def test_auto_is_llama_servers_own_where_the_template_renders_tools() -> None:
    payload = ask(parallel_tool_calls=False)
    assert plan_tools("llama-server", HERMES_TEMPLATE, dict(payload)) is None
    assert plan_tools("llama-server", SMOLLM2, payload) == ToolPlan("parsed", frozenset({"weather", "clock"}), False)
    assert "tools" not in payload and payload["messages"][1]["content"] == "Weather?"


def test_earlier_calls_go_to_a_template_without_tools_as_text() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    payload = ask(messages=[{"role": "user", "content": "Weather?"}, {"role": "assistant", "tool_calls": [call]},
                            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])  # fmt: skip
    plan_tools("llama-cpp-python", SMOLLM2, payload)
    written = '<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>'
    assert payload["messages"][2] == {"role": "assistant", "content": written}


def test_a_whole_answer_is_rewritten_as_tool_calls() -> None:
    answer = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": TWO_CALLS}, "finish_reason": "stop"}]
    }
    rewritten = json.loads(
        rewrite_answer(ToolPlan("parsed", frozenset({"weather"}), True), json.dumps(answer).encode())
    )
    choice = rewritten["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "Sure."
    assert [call["function"]["name"] for call in choice["message"]["tool_calls"]] == ["weather", "weather"]
    plain = json.dumps({"choices": [{"message": {"content": "no call"}, "finish_reason": "stop"}]}).encode()
    assert rewrite_answer(ToolPlan("parsed", frozenset({"weather"}), True), plain) == plain


def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return b"data: " + json.dumps({"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                                  ).encode() + b"\r\n\r\n"  # fmt: skip


def test_a_stream_cut_anywhere_streams_the_call() -> None:
    text = FORCED[1]
    stream = event({"role": "assistant"}) + b"".join(
        event({"content": text[i : i + 7]}) for i in range(0, len(text), 7)
    )
    stream += event({}, "stop") + b'data: {"id": "c", "choices": [], "usage": {}}\r\n\r\ndata: [DONE]\r\n\r\n'
    for cut in range(0, len(stream), 13):
        rewrite = ToolStream(ToolPlan("forced", frozenset({"weather"}), False))
        out = rewrite.feed(stream[:cut]) + rewrite.feed(stream[cut:]) + rewrite.flush()
        events = [json.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
        deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
        assert deltas[0] == {"role": "assistant"}
        first = deltas[1]["tool_calls"][0]
        assert (first["index"], first["type"], first["function"]["name"]) == (0, "function", "weather")
        arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas[1:] if "tool_calls" in d)
        assert json.loads(arguments) == {"city": 'Pa"ris}'}
        assert len([d for d in deltas if "tool_calls" in d]) > 2  # the arguments came in pieces
        assert events[-2]["choices"][0]["finish_reason"] == "tool_calls" and events[-1]["choices"] == []
        assert out.endswith(b"data: [DONE]\n\n")


def test_white_space_around_calls_is_no_content() -> None:
    read = HermesCalls(frozenset({"weather"}), parallel=True)
    call = '<tool_call>{"name": "weather", "arguments": {}}</tool_call>'
    assert assembled([*read.feed("\n "), *read.feed(call + "\n"), *read.flush()]) == ("", [("weather", "{}")])
    read = HermesCalls(frozenset({"weather"}), parallel=True)
    assert assembled([*read.feed("a\n"), *read.feed(" b "), *read.flush()]) == ("a\n b ", [])


def test_an_open_call_that_is_not_one_stays_the_text_written() -> None:
    read = HermesCalls(frozenset({"weather"}), parallel=True)
    assert assembled([*read.feed("<tool_call>{oops"), *read.flush()]) == ("<tool_call>{oops", [])


def test_earlier_calls_go_as_text_with_tool_choice_none_too() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    payload = ask(tool_choice="none", messages=[{"role": "assistant", "tool_calls": [call]}])
    plan_tools("llama-server", SMOLLM2, payload)
    assert payload["messages"] == [
        {"role": "assistant", "content": '<tool_call>{"name": "weather", "arguments": {}}</tool_call>'}
    ]
    kept = ask(messages=[{"role": "assistant", "tool_calls": [call]}])
    plan_tools("llama-server", HERMES_TEMPLATE, kept)
    assert kept["messages"] == [{"role": "assistant", "tool_calls": [call]}]


def test_a_legacy_call_is_answered_as_function_call() -> None:
    plan = ToolPlan("forced", frozenset({"weather"}), False, legacy=True)
    answer = {"choices": [{"message": {"content": FORCED[1]}, "finish_reason": "stop"}]}
    choice = json.loads(rewrite_answer(plan, json.dumps(answer).encode()))["choices"][0]
    assert choice["finish_reason"] == "function_call" and "tool_calls" not in choice["message"]
    assert choice["message"]["function_call"]["name"] == "weather"
    rewrite = ToolStream(plan)
    out = rewrite.feed(event({"content": FORCED[1]}) + event({}, "stop")) + rewrite.flush()
    events = [json.loads(line[6:]) for line in out.split(b"\n\n") if line.startswith(b"data: {")]
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas[0]["function_call"] == {"name": "weather", "arguments": ""}
    assert json.loads("".join(d["function_call"]["arguments"] for d in deltas[:-1])) == {"city": 'Pa"ris}'}
    assert events[-1]["choices"][0]["finish_reason"] == "function_call"
