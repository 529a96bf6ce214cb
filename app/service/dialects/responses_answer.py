"""The Responses API's `response` object, written from what the chat completions core answered: its output items
(a `message` with `output_text`, `function_call` items), status, usage and the request's settings repeated, in the
shape of the openai client's types (openai/types/responses/response.py)."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from app.service.dialects.responses_request import ResponsesRequest


def as_object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one: the core's answers are read without trusting them."""
    return value if isinstance(value, dict) else {}


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


@dataclass
class ResponseDraft:
    """One response as it is made: its id, when, and the request whose settings it repeats."""

    request: ResponsesRequest
    id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def body(self, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None,
             finish_reason: str | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
        """The response object; a `length` finish makes it incomplete, for max_output_tokens."""
        request, echoed = self.request, self.request.echoed
        incomplete = None
        if status == "completed" and finish_reason == "length":
            status, incomplete = "incomplete", {"reason": "max_output_tokens"}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": request.instructions,
            "max_output_tokens": echoed.get("max_output_tokens"),
            "model": request.model,
            "output": output,
            "parallel_tool_calls": echoed.get("parallel_tool_calls", True),
            "previous_response_id": request.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "store": request.store,
            "temperature": echoed.get("temperature"),
            "text": echoed.get("text", {"format": {"type": "text"}}),
            "tool_choice": echoed.get("tool_choice", "auto"),
            "tools": echoed.get("tools", []),
            "top_p": echoed.get("top_p"),
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": echoed.get("metadata", {}),
        }


def message_item(text: str, status: str = "completed", item_id: str | None = None) -> dict[str, Any]:
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": [text_part(text)] if status != "in_progress" else [],
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(call_id: str, name: str, arguments: str, status: str = "completed",
              item_id: str | None = None) -> dict[str, Any]:  # fmt: skip
    return {"id": item_id or new_id("fc"), "type": "function_call", "status": status, "call_id": call_id,
            "name": name, "arguments": arguments}  # fmt: skip


def usage(chat_usage: Any) -> dict[str, Any] | None:
    """Chat completions' usage in the Responses API's words; None when the core sent none."""
    if not isinstance(chat_usage, dict):
        return None
    prompt, completion = int(chat_usage.get("prompt_tokens") or 0), int(chat_usage.get("completion_tokens") or 0)
    details = chat_usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached or 0)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def output_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The output items of a chat completion's message: its text as a message item, then one item a tool call."""
    items = []
    if message.get("content"):
        items.append(message_item(str(message["content"])))
    for call in message.get("tool_calls") or []:
        function = as_object(call.get("function"))
        items.append(call_item(str(call.get("id") or new_id("call")), str(function.get("name") or ""),
                               str(function.get("arguments") or "")))  # fmt: skip
    return items


def output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output as the chat messages a continuation puts in its history: one assistant turn."""
    text = "".join(
        part.get("text", "") for item in output if item["type"] == "message" for part in item.get("content", [])
    )
    calls = [{"id": item["call_id"], "type": "function", "function": {"name": item["name"],
              "arguments": item["arguments"]}} for item in output if item["type"] == "function_call"]  # fmt: skip
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = calls
    return [message]


def completed(draft: ResponseDraft, answer: dict[str, Any]) -> dict[str, Any]:
    """The response object for the core's whole (not streamed) chat completion `answer`."""
    choices = answer.get("choices") or [{}]
    choice = as_object(choices[0])
    message = as_object(choice.get("message"))
    finish = choice.get("finish_reason")
    output = output_items(message)
    if finish == "length":
        for item in output:
            item["status"] = "incomplete"
    return draft.body("completed", output, usage(answer.get("usage")), finish)
