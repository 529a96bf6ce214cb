"""A Responses API `input` (a string, or a list of items) as chat messages, checked item by item so that a bad one
is a 400 naming it in the Responses API's words (`input[2].content`), not a chat field the client never sent."""

from __future__ import annotations

from typing import Any

from app.service.gateway.validation import InvalidRequest

_ROLES = ("user", "assistant", "system", "developer")
_TEXT_PARTS = ("input_text", "output_text", "text")


def input_messages(value: Any) -> list[dict[str, Any]]:
    """The chat messages `input` stands for, or InvalidRequest."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidRequest("`input` must be a string or a non-empty array of input items.", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise InvalidRequest(f"`{where}` must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            _add_call(messages, _function_call(item, where))
        elif kind == "function_call_output":
            messages.append(_call_output(item, where))
        elif kind == "reasoning":
            continue  # a reasoning item read back from another provider: the local models take none
        elif kind == "item_reference":
            raise InvalidRequest(f"`{where}` is an item reference: send the item itself, or continue a stored "
                                 "response with `previous_response_id`.", where)  # fmt: skip
        else:
            raise InvalidRequest(f"`{where}.type` `{kind}` is not an input item ModelDeck reads: it takes messages, "
                                 "function_call and function_call_output items.", f"{where}.type")  # fmt: skip
    return messages


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in _ROLES:
        raise InvalidRequest(f"`{where}.role` must be one of {', '.join(_ROLES)}.", f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise InvalidRequest(f"`{where}.content` must be a string or an array of content parts.", f"{where}.content")
    parts = [_part(part, f"{where}.content[{index}]") for index, part in enumerate(content)]
    if all(part["type"] == "text" for part in parts):
        return {"role": role, "content": "".join(part["text"] for part in parts)}
    return {"role": role, "content": parts}


def _part(part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in _TEXT_PARTS:
        if not isinstance(part.get("text"), str):
            raise InvalidRequest(f"`{where}.text` must be a string.", f"{where}.text")
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str) or url[:5].lower() != "data:":
            message = "must be a data: URL (data:image/png;base64,...): image URLs and file ids are not fetched"
            raise InvalidRequest(f"`{where}.image_url` {message}, send the image inline.", f"{where}.image_url")
        return {"type": "image_url", "image_url": {"url": url}}
    raise InvalidRequest(f"`{where}` must be an input_text, output_text or input_image part.", where)


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str) or (key != "arguments" and not item[key]):
            raise InvalidRequest(f"`{where}.{key}` must be a non-empty string.", f"{where}.{key}")
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": item["arguments"]},
    }


def _add_call(messages: list[dict[str, Any]], call: dict[str, Any]) -> None:
    """Calls in a row are one assistant turn in chat, as the model made them: with the text it wrote before them."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _call_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(item.get("call_id"), str) or not item["call_id"]:
        raise InvalidRequest(f"`{where}.call_id` must be a non-empty string.", f"{where}.call_id")
    output = item.get("output")
    if isinstance(output, list):
        output = "".join(_part(part, f"{where}.output[{index}]").get("text", "") for index, part in enumerate(output))
    if not isinstance(output, str):
        raise InvalidRequest(f"`{where}.output` must be a string or an array of text parts.", f"{where}.output")
    return {"role": "tool", "tool_call_id": item["call_id"], "content": output}
