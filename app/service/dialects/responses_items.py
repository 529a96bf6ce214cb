"""`GET /v1/responses/{id}/input_items`: a stored response's input as the items OpenAI lists (each with an id), in
pages as the openai client walks them (`limit`, `order`, `after`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from app.service.dialects.responses_answer import new_id
from app.service.gateway.validation import InvalidRequest

_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def input_items(value: Any) -> list[dict[str, Any]]:
    """The items of a request's `input`, which responses_input.py has checked; reasoning items are not kept."""
    listed = [{"role": "user", "content": value}] if isinstance(value, str) else value
    items = []
    for item in listed:
        kind = item.get("type", "message")
        if kind not in _PREFIXES:
            continue
        kept = {**item, "type": kind, "id": item.get("id") or new_id(_PREFIXES[kind]), "status": "completed"}
        if kind == "message" and isinstance(item["content"], str):
            text_type = "output_text" if item["role"] == "assistant" else "input_text"
            kept["content"] = [{"type": text_type, "text": item["content"]}]
        items.append(kept)
    return items


def item_page(items: list[dict[str, Any]], query: bytes) -> dict[str, Any]:
    """The page of `items` the query string asks for; InvalidRequest for a bad `limit`, `order` or `after`."""
    params = {name: values[-1] for name, values in parse_qs(query.decode("latin-1")).items()}
    unknown = {name for name in params if name not in ("limit", "order", "after") and not name.startswith("include")}
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidRequest(f"Unknown query parameter `{name}`.", name, "unknown_parameter")
    limit = params.get("limit", "20")
    if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= 100):
        raise InvalidRequest("`limit` must be a whole number from 1 to 100.", "limit")
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest('`order` must be "asc" or "desc".', "order")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if "after" in params:
        ids = [item["id"] for item in ordered]
        if params["after"] not in ids:
            raise InvalidRequest(f"`after` names no input item of this response: {params['after']}.", "after")
        start = ids.index(params["after"]) + 1
    page = ordered[start : start + int(limit)]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + len(page) < len(ordered),
    }
