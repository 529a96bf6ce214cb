"""The core's OpenAI answers written as Anthropic's: a chat completion as a Message, an OpenAI error body as
Anthropic's error, its HTTP status kept.

`stop_reason` comes from OpenAI's `finish_reason`: `length` is `max_tokens`, tool calls are `tool_use`, and `stop`
is `end_turn`. The engines stop at a stop sequence as at the model's end of turn, drop the sequence from the text
and answer `stop` for both, so a stop sequence cannot be told from a natural end here: `stop_sequence` is never
answered, and `stop_sequence` (the field) is null.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

# Anthropic's error type for each status the core and the gateway answer with; other 5xx are `api_error`.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use"}


def as_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one: the core's answers are read without trusting shapes."""
    return value if isinstance(value, dict) else {}


def first_choice(answer: Any) -> dict[str, Any]:
    """The first choice of an OpenAI answer or stream event; empty when it has none (a usage event)."""
    choices = as_object(answer).get("choices")
    return as_object(choices[0]) if isinstance(choices, list) and choices else {}


def error_type(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error in Anthropic's shape, as its clients read it (the body of an answer or of an `error` event)."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def message_id() -> str:
    """A new message's id, of Anthropic's shape (the core's completion ids are OpenAI's)."""
    return f"msg_{secrets.token_hex(12)}"


def tool_use_id(given: Any) -> str:
    """The engine's id of a tool call, or one of Anthropic's shape when it gave none."""
    return given if isinstance(given, str) and given else f"toolu_{secrets.token_hex(12)}"


def stop_reason(finish_reason: Any, called_tools: bool) -> str:
    """Anthropic's stop reason for OpenAI's finish reason (the module's docstring says why never `stop_sequence`)."""
    if called_tools:
        return "tool_use"
    return _STOP_REASONS.get(finish_reason, "end_turn") if isinstance(finish_reason, str) else "end_turn"


def tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's JSON arguments as the object Anthropic's `input` is. Arguments that are no JSON object (a
    model writing freely, not held to the schema) are kept whole under `arguments`, never dropped."""
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
    except ValueError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": arguments}


def usage(openai_usage: Any) -> dict[str, int]:
    """Anthropic's usage of OpenAI's: prompt tokens are input, completion tokens output (0 when not said)."""
    given = openai_usage if isinstance(openai_usage, dict) else {}
    prompt, completion = given.get("prompt_tokens"), given.get("completion_tokens")
    return {
        "input_tokens": prompt if isinstance(prompt, int) else 0,
        "output_tokens": completion if isinstance(completion, int) else 0,
    }


def message(completion: Any, model: str) -> dict[str, Any]:
    """The Message of a chat completion from the core."""
    choice = first_choice(completion)
    said = as_object(choice.get("message"))
    content: list[dict[str, Any]] = []
    text = said.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    calls = said.get("tool_calls")
    calls = calls if isinstance(calls, list) else []
    for call in calls:
        function = as_object(as_object(call).get("function"))
        if not function:
            continue
        name, arguments = str(function.get("name") or ""), function.get("arguments")
        block = {"type": "tool_use", "id": tool_use_id(as_object(call).get("id")), "name": name}
        content.append({**block, "input": tool_input(arguments)})
    return {
        "id": message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), any(b["type"] == "tool_use" for b in content)),
        "stop_sequence": None,
        "usage": usage(as_object(completion).get("usage")),
    }
