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


_SAMPLING: dict[str, Check] = {
    "model": string,
    "stream": boolean,
    "stream_options": stream_options,
    "temperature": number(0, 2),
    "top_p": number(0, 1),
    "top_k": integer(0, 1000),
    "min_p": number(0, 1),
    "n": only_one,
    "stop": string_or_strings(4),
    "presence_penalty": number(-2, 2),
    "frequency_penalty": number(-2, 2),
    "repeat_penalty": number(0, 10),
    "seed": integer(-(2**63), 2**64 - 1),
    "logit_bias": logit_bias,
    "user": string,
}

ROUTE_FIELDS: dict[str, dict[str, Check]] = {
    "/v1/chat/completions": {
        **_SAMPLING,
        "messages": messages,
        "max_tokens": integer(1, 2**31),
        "max_completion_tokens": integer(1, 2**31),
        "logprobs": boolean,
        "top_logprobs": integer(0, 20),
        "response_format": obj,
        "tools": tools,
        "tool_choice": tool_choice,
    },
    "/v1/completions": {
        **_SAMPLING,
        "prompt": string_or_strings(1, empty=False),
        "suffix": string,
        "max_tokens": integer(1, 2**31),
        "echo": boolean,
        "logprobs": integer(0, 5),
        "best_of": only_one,
    },
    "/v1/embeddings": {
        "model": string,
        "input": string_or_strings(2048, empty=False),
        "encoding_format": lambda v: None if v in ("float", "base64") else "must be `float` or `base64`",
        "user": string,
    },
}

REQUIRED: dict[str, tuple[str, ...]] = {
    "/v1/chat/completions": ("model", "messages"),
    "/v1/completions": ("model", "prompt"),
    "/v1/embeddings": ("model", "input"),
}


@dataclass(frozen=True)
class CheckedRequest:
    """What the gateway needs to know of a valid body."""

    model: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    logprobs: bool = False


def check_request(route: str, body: Any, context_length: Callable[[str], int | None]) -> CheckedRequest:
    """Validate `body` for `route`; `context_length(model)` bounds max_tokens. Raises InvalidRequest."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    fields = ROUTE_FIELDS[route]
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise InvalidRequest(f"Unknown field `{unknown[0]}` for {route}.", unknown[0])
    for name in REQUIRED[route]:
        if name not in body:
            raise InvalidRequest(f"`{name}` is required.", name)
    for name, value in body.items():
        if value is None and name not in REQUIRED[route]:
            continue
        problem = fields[name](value)
        if problem is not None:
            path, what = problem.split(" ", 1) if problem[0] == "[" else ("", problem)
            raise InvalidRequest(f"`{name}{path}` {what}.", name + path)
    model = body["model"]
    if not model:
        raise InvalidRequest("`model` must not be empty.", "model")
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    limit = context_length(model)
    if max_tokens is not None and limit is not None and max_tokens > limit:
        raise InvalidRequest(f"`max_tokens` is {max_tokens}, more than the model's context of {limit}.", "max_tokens")
    stream = bool(body.get("stream"))
    include_usage = stream and bool((body.get("stream_options") or {}).get("include_usage"))
    logprobs = bool(body.get("logprobs")) or bool(body.get("top_logprobs"))
    return CheckedRequest(model, stream, include_usage, max_tokens, logprobs)
