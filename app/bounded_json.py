"""JSON with its nesting bounded, for request bodies and for the files ModelDeck reads back: a text of 100,000 `[`
makes `json.loads` raise RecursionError, and one nested a little less deeply than that makes every later recursive
walk of it (`json.dumps`, a template's loops) raise it instead. Both are refused here as bad JSON. A request body
(`load_body`) is refused too when a string of it holds a lone UTF-16 surrogate, which no engine can encode. It
imports nothing of ModelDeck, so every layer may use it."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # far deeper than any OpenAI request (tool schemas nest a few levels) or file of ours
# UTF-8 bytes cannot hold a surrogate: only a `\uD800`-`\uDFFF` escape makes one, and only a text with such an
# escape is walked for it. A pair of them (an emoji) is one character after json.loads, and is kept.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadJson(ValueError):
    """The text is not JSON, or is nested more deeply than MAX_DEPTH; the message says where or how deep."""


class LoneSurrogate(BadJson):
    """A string of a request body holds an unpaired UTF-16 surrogate; `param` names the field (`messages[0].content`),
    None for a key of the body itself."""

    def __init__(self, param: str | None, surrogate: str, in_key: bool) -> None:
        escape = f"\\u{ord(surrogate):04x}"
        where = (f"A key in `{param}`" if param else "A key of the body") if in_key else f"`{param}`"
        super().__init__(
            f"{where} holds a lone UTF-16 surrogate ({escape}), which is no text: send the character itself, "
            "or both halves of its surrogate pair."
        )
        self.param = param


def load_json(raw: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """`raw` parsed, or BadJson. Only bodies with more brackets than `max_depth` are walked for their depth."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise BadJson(f"nested more than {max_depth} levels deep") from None
    except ValueError as exc:  # UnicodeDecodeError included
        raise BadJson(str(exc)) from None
    brackets = raw.count(b"[") + raw.count(b"{") if isinstance(raw, bytes) else raw.count("[") + raw.count("{")
    if brackets > max_depth and _depth_over(value, max_depth):
        raise BadJson(f"nested more than {max_depth} levels deep")
    return value


def load_body(raw: bytes, max_depth: int = MAX_DEPTH) -> Any:
    """A request body parsed as `load_json` does, or BadJson; LoneSurrogate when a string in it (a value or a key)
    holds an unpaired surrogate."""
    value = load_json(raw, max_depth)
    if may_hold_surrogate(raw):
        _refuse_lone_surrogate(value)
    return value


def may_hold_surrogate(raw: bytes) -> bool:
    """Whether the JSON text `raw` has a surrogate's escape; without one, no string parsed from it holds one."""
    return _SURROGATE_ESCAPE.search(raw) is not None


def _refuse_lone_surrogate(value: Any) -> None:
    """Raise LoneSurrogate for the first string of `value` that holds a surrogate, walked without recursion."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                raise LoneSurrogate(path or None, found.group(), in_key=False)
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in reversed(list(enumerate(item))))
        elif isinstance(item, dict):
            for key in item:
                found = _SURROGATE.search(key)
                if found:
                    raise LoneSurrogate(path or None, found.group(), in_key=True)
            stack.extend((child, f"{path}.{key}" if path else key) for key, child in reversed(item.items()))


def _depth_over(value: Any, max_depth: int) -> bool:
    """Whether `value` nests more than `max_depth` arrays and objects, walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False
