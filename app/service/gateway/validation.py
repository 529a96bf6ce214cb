"""Checks of OpenAI request bodies before they reach an engine: only known fields, of the right types, within
bounds. Anything else is a 400 with an OpenAI-shaped error naming the field."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Returns what is wrong, or None; a problem inside the value starts with its path: "[1].content must be ...".
Check = Callable[[Any], str | None]


class InvalidRequest(ValueError):
    """The body breaks a rule; `param` names the field, `code` is OpenAI's for the rule where it has one."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def number(low: float, high: float) -> Check:
    return lambda v: None if _is_number(v) and low <= v <= high else f"must be a number from {low} to {high}"


def integer(low: int, high: int) -> Check:
    return lambda v: None if _is_int(v) and low <= v <= high else f"must be a whole number from {low} to {high}"


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def string(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def obj(value: Any) -> str | None:
    return None if isinstance(value, dict) else "must be an object"


def string_or_strings(limit: int, empty: bool = True) -> Check:
    """A string or a list of 1 to `limit` strings; `empty` False: none of them empty (engines fail on one)."""

    def good(text: Any) -> bool:
        return isinstance(text, str) and (empty or text != "")

    def check(value: Any) -> str | None:
        if good(value) or (isinstance(value, list) and 0 < len(value) <= limit and all(good(v) for v in value)):
            return None
        if empty:
            return f"must be a string or a list of 1 to {limit} strings"
        return f"must be a non-empty string or a list of 1 to {limit} non-empty strings"

    return check


def embedding_input(limit: int) -> Check:
    """Text (a non-empty string, or a list of 1 to `limit`) or token ids (a non-empty list of token ids, or a list of
    1 to `limit` of them), as OpenAI's embeddings take them."""

    def tokens(value: Any) -> bool:
        return (
            isinstance(value, list)
            and len(value) > 0
            and all(type(token) is int and 0 <= token < 2**31 for token in value)
        )

    def check(value: Any) -> str | None:
        if (isinstance(value, str) and value) or tokens(value):
            return None
        if (
            isinstance(value, list)
            and 0 < len(value) <= limit
            and (all(isinstance(v, str) and v for v in value) or all(tokens(v) for v in value))
        ):
            return None
        return (
            f"must be a non-empty string, a list of 1 to {limit} non-empty strings, or token ids: a list of whole "
            f"numbers from 0, or a list of 1 to {limit} such lists"
        )

    return check


def is_token_input(value: Any) -> bool:
    """Whether a checked embeddings input is token ids rather than text."""
    return isinstance(value, list) and not isinstance(value[0], str)


def logit_bias(value: Any) -> str | None:
    if isinstance(value, dict) and all(
        token.isascii() and token.isdigit() and _is_number(bias) and -100 <= bias <= 100
        for token, bias in value.items()
    ):
        return None
    return 'must be an object of token ids to numbers from -100 to 100, such as {"50256": -100}'


def tools(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be an array"
    for index, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not _named(tool.get("function")):
            return f'[{index}] must be an object {{"type": "function", "function": {{"name": ...}}}}'
        for name, kind, what in _FUNCTION_FIELDS:
            field = tool["function"].get(name)
            if field is not None and not isinstance(field, kind):
                return f"[{index}].function.{name} must be {what}"
    return None


_FUNCTION_FIELDS = (("description", str, "a string"), ("parameters", dict, "an object (a JSON Schema)"),
                    ("strict", bool, "true or false"))  # fmt: skip


def tool_choice(value: Any) -> str | None:
    if value in ("none", "auto", "required"):
        return None
    if isinstance(value, dict) and value.get("type") == "function" and _named(value.get("function")):
        return None
    return 'must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}'


def _named(function: Any) -> bool:
    return isinstance(function, dict) and isinstance(function.get("name"), str) and function["name"] != ""


def only_one(value: Any) -> str | None:
    return None if value == 1 else "must be 1 (one choice per request)"


def stream_options(value: Any) -> str | None:
    if not isinstance(value, dict) or set(value) - {"include_usage"}:
        return "must be an object with `include_usage` only"
    return boolean(value.get("include_usage", False))


def messages(value: Any) -> str | None:
    if not isinstance(value, list) or not value:
        return "must be a non-empty array of messages"
    return _first_problem(value, _message_problem)


def _first_problem(items: list[Any], check: Check) -> str | None:
    """The first item's problem, after its index: "[2].role must be ..."."""
    for index, item in enumerate(items):
        problem = check(item)
        if problem is not None:
            return f"[{index}]{problem}"
    return None


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return " must be an object"
    if message.get("role") not in ("system", "developer", "user", "assistant", "tool"):
        return ".role must be one of system, developer, user, assistant, tool"
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        return ".content must be a string or an array of parts"
    # OpenAI's rules, which the engines' chat templates rely on: only an assistant's content may be left out
    if content is None and message["role"] != "assistant":
        return f".content is required for a {message['role']} message"
    if message["role"] == "tool" and not isinstance(message.get("tool_call_id"), str):
        return ".tool_call_id must be a string: the id of the call this tool message answers"
    # null is "left out", as the openai SDK writes an assistant message it read back (`tool_calls: None`)
    if message.get("name") is not None and not isinstance(message["name"], str):
        return ".name must be a string"
    if message.get("tool_calls") is not None:
        problem = _tool_calls_problem(message["role"], message["tool_calls"])
        if problem is not None:
            return f".tool_calls{problem}"
    if isinstance(content, list) and (problem := _first_problem(content, _part_problem)) is not None:
        return f".content{problem}"
    return None


def _tool_calls_problem(role: str, calls: Any) -> str | None:
    """What is wrong with a message's `tool_calls`, as OpenAI checks them. Both GGUF engines answer most of these with
    a 500; llama-server takes `arguments` as an object, which OpenAI and llama-cpp-python do not."""
    if role != "assistant":
        return f" are only for assistant messages, not {role} ones"
    if not isinstance(calls, list):
        return " must be an array of tool calls"
    return _first_problem(calls, _tool_call_problem)


def _tool_call_problem(call: Any) -> str | None:
    if not isinstance(call, dict):
        return ' must be an object {"id": ..., "type": "function", "function": {"name": ..., "arguments": ...}}'
    if not isinstance(call.get("id"), str):
        return ".id must be a string"
    if call.get("type") != "function":
        return '.type must be "function"'
    function = call.get("function")
    if not isinstance(function, dict):
        return ".function must be an object with `name` and `arguments`"
    if not _named(function):
        return ".function.name must be a non-empty string"
    if not isinstance(function.get("arguments"), str):
        return ".function.arguments must be a string: the arguments as JSON text"
    return None


def _part_problem(part: Any) -> str | None:
    """What is wrong with one content part. Images only inline: an engine with a vision model fetches an
    image URL itself, from this machine, which would let any client reach the user's network through it."""
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        return " must be an object with a `type`"
    if part["type"] == "text" and not isinstance(part.get("text"), str):
        return ".text must be a string"
    if part["type"] != "image_url":
        return None
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        return ".image_url must be an object with a `url`"
    if url[:5].lower() != "data:":
        return (
            ".image_url.url must be a data: URL (data:image/png;base64,...): image URLs are not fetched, "
            "send the image inline"
        )
    return None


@dataclass(frozen=True)
class CheckedRequest:
    """What the gateway needs to know of a valid body."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    logprobs: bool = False
