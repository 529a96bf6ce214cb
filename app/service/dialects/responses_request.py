"""A Responses API request (`POST /v1/responses`) read into the chat completions request the core serves.

Every field of OpenAI's reference has a fate here, as in app.service.gateway.openai_fields: translated to its chat
counterpart, kept on the response (metadata, store), dropped with no local meaning, or refused with a sentence
saying why. A field outside the table is a 400 naming it. Input items become chat messages; the earlier turns of
`previous_response_id` are put before them by the dialect, which holds the store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.service.dialects.responses_input import input_messages
from app.service.gateway.validation import InvalidRequest, boolean, integer, number, obj, string

_BUILT_IN = "there is none locally: ModelDeck serves function tools only"


@dataclass
class ResponsesRequest:
    """What the dialect needs of a valid request: the chat payload less its messages, the new input as messages,
    and what the response object repeats."""

    model: str
    chat: dict[str, Any]
    input: list[dict[str, Any]]
    instructions: str | None = None
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    echoed: dict[str, Any] = field(default_factory=dict)
    raw_input: Any = None  # `input` as sent, for the stored input items


def _check(check: Callable[[Any], str | None]) -> Callable[[str, Any], None]:
    def run(name: str, value: Any) -> None:
        problem = check(value)
        if problem is not None:
            raise InvalidRequest(f"`{name}` {problem}.", name)

    return run


def _metadata(name: str, value: Any) -> None:
    if not (isinstance(value, dict) and len(value) <= 16 and all(
        isinstance(k, str) and len(k) <= 64 and isinstance(v, str) and len(v) <= 512 for k, v in value.items()
    )):  # fmt: skip
        raise InvalidRequest(f"`{name}` must be an object of at most 16 strings (keys up to 64 characters, "
                             "values up to 512).", name)  # fmt: skip


def _tools(name: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InvalidRequest(f"`{name}` must be an array of tools.", name)
    chat = []
    for index, tool in enumerate(value):
        where = f"{name}[{index}]"
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise InvalidRequest(f"`{where}` must be an object with a `type`.", where)
        if tool["type"] != "function":
            raise InvalidRequest(f"`{where}` is the built-in tool `{tool['type']}`, and {_BUILT_IN}.", where)
        unknown = set(tool) - {"type", "name", "description", "parameters", "strict"}
        if unknown:
            raise InvalidRequest(f"`{where}` has unknown field `{sorted(unknown)[0]}`.", where)
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise InvalidRequest(f"`{where}.name` must be a non-empty string.", f"{where}.name")
        for key, kind, what in (("description", str, "a string"), ("parameters", dict, "an object (a JSON Schema)"),
                                ("strict", bool, "true or false")):  # fmt: skip
            if tool.get(key) is not None and not isinstance(tool[key], kind):
                raise InvalidRequest(f"`{where}.{key}` must be {what}.", f"{where}.{key}")
        function = {
            key: tool[key] for key in ("name", "description", "parameters", "strict") if tool.get(key) is not None
        }
        chat.append({"type": "function", "function": function})
    return chat


def _tool_choice(name: str, value: Any) -> Any:
    if value in ("none", "auto", "required"):
        return value
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "function" and isinstance(value.get("name"), str) and value["name"]:
        return {"type": "function", "function": {"name": value["name"]}}
    if isinstance(kind, str) and kind != "function":
        raise InvalidRequest(f"`{name}` names the built-in tool `{kind}`, and {_BUILT_IN}.", name)
    raise InvalidRequest(f'`{name}` must be "none", "auto", "required" or {{"type": "function", "name": ...}}.', name)


def _text(name: str, value: Any) -> dict[str, Any] | None:
    """The chat `response_format` for `text.format`; None for plain text."""
    if not isinstance(value, dict) or set(value) - {"format", "verbosity"}:
        raise InvalidRequest(f"`{name}` must be an object with `format` (and `verbosity`, which is dropped).", name)
    form = value.get("format", {"type": "text"})
    where = f"{name}.format"
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        if not isinstance(form.get("name"), str) or not isinstance(form.get("schema"), dict):
            raise InvalidRequest(f"`{where}` of type json_schema needs a `name` (a string) and a `schema` (an "
                                 "object).", where)  # fmt: skip
        schema = {key: form[key] for key in ("name", "schema", "description", "strict") if form.get(key) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise InvalidRequest(f'`{where}` must be {{"type": "text"}}, {{"type": "json_object"}} or {{"type": '
                         '"json_schema", "name": ..., "schema": {...}}.', where)  # fmt: skip


def _only(allowed: Callable[[Any], bool], why: str) -> Callable[[str, Any], None]:
    def check(name: str, value: Any) -> None:
        if not allowed(value):
            raise InvalidRequest(f"`{name}` {why}.", name)

    return check


def _string_or_null(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "must be a string or null"


_DROPPED: dict[str, Callable[[str, Any], None]] = {
    # Accepted and dropped: no meaning on a local engine (the response repeats them where OpenAI's does).
    "user": _check(string),
    "service_tier": _check(string),
    "prompt_cache_key": _check(string),
    "prompt_cache_retention": _check(string),
    "safety_identifier": _check(string),
    "parallel_tool_calls": _check(boolean),
    "max_tool_calls": _check(integer(1, 2**31)),
    "stream_options": _check(obj),
    "reasoning": _only(
        lambda v: v is None or isinstance(v, dict),
        "must be an object; it is dropped: the engines have no reasoning budget to set",
    ),
    "truncation": _only(
        lambda v: v in (None, "disabled"),
        'must be "disabled": ModelDeck never drops input items to '
        "fit the context; a prompt over it is a 400 (context_length_exceeded)",
    ),
    "include": _only(
        lambda v: v is None or v == [],
        "must be empty: ModelDeck has no encrypted reasoning, tool results or log probabilities to include",
    ),
    "background": _only(lambda v: v in (None, False), "must be false: ModelDeck answers in the foreground only"),
    "top_logprobs": _only(lambda v: v in (None, 0), "must be 0: the Responses dialect returns no log probabilities"),
}
_REFUSED = {
    "conversation": "The Conversations API is not served: continue with `previous_response_id`.",
    "prompt": "Stored prompt templates are not served: send `instructions` and `input`.",
    "context_management": "Context compaction is not served: the conversation goes to the model whole.",
}
_KNOWN = {"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "text",
          "stream", "metadata", "store", "previous_response_id", *_DROPPED, *_REFUSED}  # fmt: skip


def read_request(body: dict[str, Any]) -> ResponsesRequest:
    """The request `body` means, or InvalidRequest naming the first field that is wrong."""
    for name in body:
        if name not in _KNOWN:
            raise InvalidRequest(f"Unknown field `{name}`.", name, "unknown_parameter")
        if name in _REFUSED:
            raise InvalidRequest(f"`{name}`: {_REFUSED[name]}", name)
        if name in _DROPPED:
            _DROPPED[name](name, body[name])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("`model` is required: a model's id in GET /v1/models.", "model")
    if "input" not in body:
        raise InvalidRequest("`input` is required: a string or an array of input items.", "input")
    for name, check in (("instructions", _string_or_null), ("previous_response_id", _string_or_null),
                        ("stream", boolean), ("store", boolean)):  # fmt: skip
        if name in body and body[name] is not None:
            _check(check)(name, body[name])
    chat: dict[str, Any] = {"model": model}
    echoed: dict[str, Any] = {}
    numbers: tuple[tuple[str, Callable[[Any], str | None], str], ...] = (
        ("max_output_tokens", integer(1, 2**31), "max_tokens"),
        ("temperature", number(0, 2), "temperature"),
        ("top_p", number(0, 1), "top_p"),
    )
    for name, bounds, chat_name in numbers:
        if body.get(name) is not None:
            _check(bounds)(name, body[name])
            chat[chat_name] = echoed[name] = body[name]
    if body.get("metadata") is not None:
        _metadata("metadata", body["metadata"])
        echoed["metadata"] = body["metadata"]
    if body.get("tools") is not None:
        chat["tools"] = _tools("tools", body["tools"])
        echoed["tools"] = body["tools"]
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice("tool_choice", body["tool_choice"])
        echoed["tool_choice"] = body["tool_choice"]
    if body.get("text") is not None:
        response_format = _text("text", body["text"])
        if response_format is not None:
            chat["response_format"] = response_format
        echoed["text"] = {"format": body["text"].get("format", {"type": "text"})}
    if isinstance(body.get("parallel_tool_calls"), bool):
        echoed["parallel_tool_calls"] = body["parallel_tool_calls"]
    return ResponsesRequest(
        model=model,
        chat=chat,
        input=input_messages(body["input"]),
        instructions=body.get("instructions"),
        stream=body.get("stream") is True,
        store=body.get("store") is not False,
        previous_response_id=body.get("previous_response_id"),
        echoed=echoed,
        raw_input=body["input"],
    )
