"""JSON with its nesting bounded, for request bodies and for the files ModelDeck reads back: a text of 100,000 `[`
makes `json.loads` raise RecursionError, and one nested a little less deeply than that makes every later recursive
walk of it (`json.dumps`, a template's loops) raise it instead. Both are refused here as bad JSON. It imports
nothing of ModelDeck, so every layer may use it."""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # far deeper than any OpenAI request (tool schemas nest a few levels) or file of ours


class BadJson(ValueError):
    """The text is not JSON, or is nested more deeply than MAX_DEPTH; the message says where or how deep."""


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
