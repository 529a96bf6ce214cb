"""OpenAI tool calling on the GGUF engines: the request said so that each engine can answer it, and the answer
written back as OpenAI's `tool_calls`.

Neither engine does all of `tool_choice` by itself on templates without tools (the bundled model's, and many
more): llama-cpp-python constrains a named function only and never parses a call the model writes; llama-server
(pinned build) reads `tool_choice` as a string only, so a named function is "auto", and answers "required" with
plain text. So:

- `none`: the tools are not offered at all, and the model answers text.
- `required` and a named function: the tools leave the request, and a `response_format` JSON schema takes their
  place, an anyOf of `{"name": <const>, "arguments": <parameters>}` per tool allowed (the named one only). Both
  engines decode under that schema's grammar, so even a tiny model writes a valid call; the answer's JSON is
  rewritten as one tool call. The tools are described in a system message, for the model to choose arguments.
- `auto` (or no `tool_choice`): llama-server with `--jinja` writes and parses calls in its template's format when the
  template renders tools; otherwise (llama-cpp-python always, llama-server for templates without tools, where it
  parses nothing) the gateway parses calls in the Hermes form (`<tool_call>{json}</tool_call>`, the common one)
  out of the model's text, and describes the tools in a system message when the model's chat template does not
  render them. Earlier calls go back to such a template as the same text.

The legacy `functions` and `function_call` are said as tools here too, and their call answered as `function_call`.
Only requests that carry one of these fields come here (`wants_tools`, five dict lookups); all others keep the
gateway's byte path.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from app.service.gateway.tool_text import CallStart, Piece, extractor
from app.service.gateway.validation import InvalidRequest

_FIELDS = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")
_PARSES_ITSELF = frozenset({"llama-server"})  # with --jinja: calls in the template's format become `tool_calls`
Mode = Literal["forced", "parsed"]


@dataclass(frozen=True)
class ToolPlan:
    """How the answer to a request with tools is read: `forced`, the engine's content is one call as JSON;
    `parsed`, calls in the Hermes form are taken out of the content."""

    mode: Mode
    names: frozenset[str]  # the offered tools: a parsed call naming another one stays text
    parallel: bool  # False: at most one call is kept
    legacy: bool = False  # asked with `functions`: the call is answered as `function_call`


def wants_tools(payload: dict[str, Any]) -> bool:
    return any(name in payload for name in _FIELDS)


def plan_tools(engine: str, chat_template: str | None, payload: dict[str, Any]) -> ToolPlan | None:
    """Rewrite `payload` in place for `engine`; the plan for its answer, None when it is read as it comes.

    Raises InvalidRequest for a `tool_choice` naming a tool that is not offered."""
    legacy = _legacy_to_tools(payload)
    tools: list[dict[str, Any]] = payload.get("tools") or []
    choice = payload.get("tool_choice", "auto")
    parallel = payload.get("parallel_tool_calls") is not False and not legacy
    # A template that names `tools` renders them, one that names `tool_calls` renders an assistant's calls, as
    # tool-tuned models' do (Hermes, Qwen 2.5, Llama 3.1); SmolLM2's and other content-only templates name neither
    renders_tools = chat_template is not None and "tools" in chat_template
    engine_reads_calls = engine in _PARSES_ITSELF and renders_tools
    if not engine_reads_calls and (chat_template is None or "tool_calls" not in chat_template):
        _calls_as_text(payload["messages"])
    if not tools or choice == "none":
        for name in _FIELDS:
            payload.pop(name, None)
        return None
    names = [tool["function"]["name"] for tool in tools]
    if isinstance(choice, dict):
        named = choice["function"]["name"]
        if named not in names:
            offered = ", ".join(names)
            raise InvalidRequest(f"`tool_choice` names `{named}`, which is not in `tools` ({offered}).", "tool_choice")
        tools = [tool for tool in tools if tool["function"]["name"] == named]
    if choice == "required" or isinstance(choice, dict):
        for name in _FIELDS:
            payload.pop(name, None)
        payload["response_format"] = {"type": "json_schema", "json_schema": {"name": "tool_call",
                                                                             "schema": call_schema(tools)}}  # fmt: skip
        _describe_tools(payload["messages"], tools, forced=True)
        plan = ToolPlan("forced", frozenset(names), parallel=False, legacy=legacy)
    elif engine_reads_calls:
        return None
    else:
        payload.pop("parallel_tool_calls", None)  # kept by the gateway: llama-cpp-python has no such option
        if not renders_tools:  # the model reads of them in a system message, and no engine parses calls too
            payload.pop("tools")
            payload.pop("tool_choice", None)
            _describe_tools(payload["messages"], tools, forced=False)
        plan = ToolPlan("parsed", frozenset(names), parallel, legacy)
    return plan


def _legacy_to_tools(payload: dict[str, Any]) -> bool:
    """`functions` and `function_call` said as `tools` and `tool_choice` (which win where both are sent); True
    when the request offered `functions`."""
    functions = payload.pop("functions", None)
    if functions is not None:
        payload.setdefault("tools", [{"type": "function", "function": function} for function in functions])
    call = payload.pop("function_call", None)
    if call is not None:
        choice = call if isinstance(call, str) else {"type": "function", "function": {"name": call["name"]}}
        payload.setdefault("tool_choice", choice)
    return functions is not None


def call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema of one call to one of `tools`: its name a constant, its arguments its parameters."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                "arguments": tool["function"].get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
        }
        for tool in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def _describe_tools(messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, forced: bool) -> None:
    """Tell the model of the tools in the first system message (one is added where there is none: many templates
    take a system message first only)."""
    listed = "\n".join(json.dumps(tool["function"], ensure_ascii=False) for tool in tools)
    how = (
        'Answer with one call as JSON: {"name": <tool name>, "arguments": <arguments>}.'
        if forced
        else 'To call a tool, write <tool_call>{"name": <tool name>, "arguments": <arguments>}</tool_call>.'
    )
    note = f"You can call these tools:\n{listed}\n{how}"
    first = messages[0]
    if first["role"] in ("system", "developer") and isinstance(first.get("content"), str):
        first["content"] = f"{first['content']}\n\n{note}"
    else:
        messages.insert(0, {"role": "system", "content": note})


def _calls_as_text(messages: list[dict[str, Any]]) -> None:
    """An assistant's earlier calls in the form the model writes them, for templates that render content only:
    without them, the model would read tool results with no call before them."""
    for message in messages:
        calls = message.pop("tool_calls", None) if message["role"] == "assistant" else None
        if calls:
            written = "".join(
                "<tool_call>"
                + json.dumps({"name": call["function"]["name"], "arguments": _loaded(call["function"]["arguments"])})
                + "</tool_call>"
                for call in calls
            )
            text = message.get("content")
            message["content"] = f"{text}\n{written}" if isinstance(text, str) and text else written


def _loaded(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def rewrite_answer(plan: ToolPlan, answer: bytes) -> bytes:
    """An engine's whole chat answer with the calls in its content written as `tool_calls`; unchanged when there
    are none (or when it is not an answer the gateway can read)."""
    try:
        decoded = json.loads(answer)
        choices = decoded["choices"]
        message = choices[0]["message"]
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        return answer
    content = message.get("content")
    if not isinstance(content, str):
        return answer
    read = extractor(plan.mode, plan.names, plan.parallel)
    pieces: list[Piece] = [*read.feed(content), *read.flush()]
    calls: list[dict[str, Any]] = []
    text = []
    for piece in pieces:
        if isinstance(piece, CallStart):
            calls.append({"id": piece.id, "type": "function", "function": {"name": piece.name, "arguments": ""}})
        elif piece.call is not None:
            calls[piece.call]["function"]["arguments"] += piece.text
        else:
            text.append(piece.text)
    if not calls:
        return answer
    message["content"] = "".join(text).strip() or None
    if plan.legacy:
        message["function_call"] = calls[0]["function"]
    else:
        message["tool_calls"] = calls
    if choices[0].get("finish_reason") == "stop":
        choices[0]["finish_reason"] = "function_call" if plan.legacy else "tool_calls"
    return json.dumps(decoded).encode()
