"""Anthropic's Messages request, checked field by field and written as the OpenAI chat completions request the
gateway's core serves. A field outside Anthropic's reference is a 400 naming it, as on the OpenAI side; documented
fields with no local meaning (`metadata`, `service_tier`, cache controls) are dropped; what the engines cannot do
(extended thinking, Anthropic's server tools, documents, image URLs) is refused saying why."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

COUNT_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "thinking"})
MESSAGES_FIELDS = COUNT_FIELDS | {"max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "metadata",
                                  "service_tier", "stream"}  # fmt: skip
MAX_STOP_SEQUENCES = 4  # both GGUF engines' limit, as the core checks `stop`
_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


class AnthropicInvalid(ValueError):
    """A request Anthropic's API would refuse with a 400 `invalid_request_error`; the message names the field."""


@dataclass(frozen=True)
class Translated:
    """The OpenAI chat request for the core, and what the answer's translation needs to know of the request."""

    payload: dict[str, Any]
    model: str
    stream: bool
    stop_sequences: tuple[str, ...]


def translate(body: dict[str, Any], counting: bool = False) -> Translated:
    """The OpenAI chat request of a Messages request (`counting`: of a count_tokens request, which has no
    `max_tokens` and no sampling fields). Raises AnthropicInvalid."""
    known = COUNT_FIELDS if counting else MESSAGES_FIELDS
    for name in body:
        if name not in known:
            raise AnthropicInvalid(f"{name}: Extra inputs are not permitted")
    model = _required(body, "model", str, "a string")
    if not model:
        raise AnthropicInvalid("model: must not be empty")
    messages = _chat_messages(body)
    payload: dict[str, Any] = {"model": model, "messages": messages}
    _thinking(body.get("thinking"))
    if "tools" in body:
        payload["tools"] = _tools(body["tools"])
    if "tool_choice" in body:
        payload["tool_choice"] = _tool_choice(body["tool_choice"])
    if counting:
        return Translated(payload, model, False, ())
    max_tokens = _required(body, "max_tokens", int, "an integer")
    if max_tokens < 1 or max_tokens > 2**31:
        raise AnthropicInvalid("max_tokens: must be a positive integer")
    payload["max_tokens"] = max_tokens
    for name, low, high in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        if name in body:
            payload[name] = _number(body[name], name, low, high)
    if "top_k" in body:
        top_k = body["top_k"]
        if not _is_int(top_k) or not 0 <= top_k <= 1000:
            raise AnthropicInvalid("top_k: must be an integer from 0 to 1000")
        payload["top_k"] = top_k
    stops = _stop_sequences(body.get("stop_sequences", []))
    if stops:
        payload["stop"] = list(stops)
    for name, kind in (("metadata", dict), ("service_tier", str)):
        if name in body and not isinstance(body[name], kind):
            raise AnthropicInvalid(f"{name}: must be {'an object' if kind is dict else 'a string'}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise AnthropicInvalid("stream: must be a boolean")
    if stream:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    return Translated(payload, model, stream, stops)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _required(body: dict[str, Any], name: str, kind: type, said: str) -> Any:
    if name not in body:
        raise AnthropicInvalid(f"{name}: Field required")
    value = body[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise AnthropicInvalid(f"{name}: must be {said}")
    return value


def _number(value: Any, name: str, low: float, high: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        raise AnthropicInvalid(f"{name}: must be a number from {low:g} to {high:g}")
    return float(value)


def _stop_sequences(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise AnthropicInvalid("stop_sequences: must be an array of non-empty strings")
    if len(value) > MAX_STOP_SEQUENCES:
        raise AnthropicInvalid(f"stop_sequences: at most {MAX_STOP_SEQUENCES} here (the engines' limit)")
    return tuple(value)


def _thinking(value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise AnthropicInvalid('thinking: must be an object with a `type` ("enabled" or "disabled")')
    if value["type"] != "disabled":
        raise AnthropicInvalid(
            "thinking: extended thinking is not available here: the local engines have no thinking budget to set. "
            'Leave `thinking` out or send {"type": "disabled"}.'
        )


def _text_of(blocks: list[Any], where: str) -> str:
    """The text of a list of text blocks (a system prompt, a tool result), joined with newlines."""
    texts = []
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise AnthropicInvalid(f"{where}.{index}: must be a text block ({{'type': 'text', 'text': ...}})")
        texts.append(block["text"])
    return "\n".join(texts)


def _chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system is not None:
        if isinstance(system, list):
            system = _text_of(system, "system")
        if not isinstance(system, str):
            raise AnthropicInvalid("system: must be a string or an array of text blocks")
        messages.append({"role": "system", "content": system})
    given = _required(body, "messages", list, "an array of messages")
    if not given:
        raise AnthropicInvalid("messages: at least one message is required")
    for index, message in enumerate(given):
        where = f"messages.{index}"
        if not isinstance(message, dict):
            raise AnthropicInvalid(f"{where}: must be an object with `role` and `content`")
        extra = next((name for name in message if name not in ("role", "content")), None)
        if extra is not None:
            raise AnthropicInvalid(f"{where}.{extra}: Extra inputs are not permitted")
        role, content = message.get("role"), message.get("content")
        if role not in ("user", "assistant"):
            raise AnthropicInvalid(f'{where}.role: must be "user" or "assistant"')
        if isinstance(content, str):
            messages.append({"role": role, "content": content})
        elif isinstance(content, list):
            messages.extend((_user_turn if role == "user" else _assistant_turn)(content, f"{where}.content"))
        else:
            raise AnthropicInvalid(f"{where}.content: must be a string or an array of content blocks")
    return messages


def _block(block: Any, where: str, kinds: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise AnthropicInvalid(f"{where}: must be a content block, an object with a `type`")
    if block["type"] not in kinds:
        raise AnthropicInvalid(f"{where}.type: `{block['type']}` is not one of {', '.join(kinds)} here")
    return block


def _string(block: dict[str, Any], name: str, where: str) -> str:
    value = block.get(name)
    if not isinstance(value, str):
        raise AnthropicInvalid(f"{where}.{name}: must be a string")
    return value


def _user_turn(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """A user turn: its tool results first, as `tool` messages (OpenAI wants them right after the assistant's
    calls), then its text and images as one user message."""
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for index, given in enumerate(blocks):
        at = f"{where}.{index}"
        block = _block(given, at, ("text", "image", "tool_result"))
        if block["type"] == "text":
            parts.append({"type": "text", "text": _string(block, "text", at)})
        elif block["type"] == "image":
            parts.append(_image(block, at))
        else:
            results.append(_tool_result(block, at))
    if not parts:
        return results
    if all(part["type"] == "text" for part in parts):
        return [*results, {"role": "user", "content": "\n".join(part["text"] for part in parts)}]
    return [*results, {"role": "user", "content": parts}]


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise AnthropicInvalid(
            f"{where}.source: must be a base64 source ({{'type': 'base64', 'media_type': ..., 'data': ...}}): "
            "image URLs are not fetched, send the image inline"
        )
    media_type, data = _string(source, "media_type", f"{where}.source"), _string(source, "data", f"{where}.source")
    return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}


def _tool_result(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content", "")
    if isinstance(content, list):
        content = _text_of(content, f"{where}.content")
    if not isinstance(content, str):
        raise AnthropicInvalid(f"{where}.content: must be a string or an array of text blocks")
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise AnthropicInvalid(f"{where}.is_error: must be a boolean")
    if is_error:  # OpenAI's tool messages have no error flag: the model reads it in the text
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": _string(block, "tool_use_id", where), "content": content}


def _assistant_turn(blocks: list[Any], where: str) -> list[dict[str, Any]]:
    """An assistant turn: its text, and its tool uses as `tool_calls`. Thinking blocks a client sends back are
    left out: the engines wrote none, and the model reads none."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for index, given in enumerate(blocks):
        at = f"{where}.{index}"
        block = _block(given, at, ("text", "tool_use", "thinking", "redacted_thinking"))
        if block["type"] == "text":
            texts.append(_string(block, "text", at))
        elif block["type"] == "tool_use":
            tool_input = block.get("input")
            if not isinstance(tool_input, dict):
                raise AnthropicInvalid(f"{at}.input: must be an object")
            call = {"name": _string(block, "name", at), "arguments": json.dumps(tool_input)}
            calls.append({"id": _string(block, "id", at), "type": "function", "function": call})
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise AnthropicInvalid("tools: must be an array of tools")
    tools = []
    for index, tool in enumerate(value):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise AnthropicInvalid(f"{where}: must be an object with `name` and `input_schema`")
        kind = tool.get("type", "custom")
        if kind != "custom":
            raise AnthropicInvalid(
                f"{where}.type: `{kind}` is one of Anthropic's server tools, which run on Anthropic's servers; "
                "here only your own tools (`name`, `description`, `input_schema`) are served"
            )
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise AnthropicInvalid(f"{where}.input_schema: must be an object (a JSON schema)")
        function: dict[str, Any] = {"name": _string(tool, "name", where), "parameters": schema}
        if "description" in tool:
            function["description"] = _string(tool, "description", where)
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: Any) -> str | dict[str, Any]:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in _TOOL_CHOICES:
        return _TOOL_CHOICES[kind]
    if kind == "tool":
        return {"type": "function", "function": {"name": _string(value, "name", "tool_choice")}}
    raise AnthropicInvalid('tool_choice: must be an object of type "auto", "any", "tool" (with a `name`) or "none"')
