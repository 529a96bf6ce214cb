"""Prompt and completion text for the request log, kept only when the user turns it on (`--log-request-text`).

The gateway hands over what it holds anyway: the request's prompt as parsed and the answer's bytes as they were
forwarded. The text is pulled out of them on the request log's writer thread, after the request, so a stream
pays one list append per chunk when the option is on and nothing at all when it is off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

PROMPT_FIELDS = {"/v1/chat/completions": "messages", "/v1/completions": "prompt", "/v1/embeddings": "input"}


@dataclass
class RequestText:
    """What one request said and was answered, still raw."""

    route: str
    prompt: Any  # the request's messages, prompt or input, as the client sent them
    stream: bool
    answer: list[bytes] = field(default_factory=list)  # the answer's bytes as forwarded: one body, or SSE chunks


def prompt_json(text: RequestText) -> str:
    """The prompt as JSON: the messages of a chat, the prompt of a completion, the input of an embedding."""
    return json.dumps(text.prompt, ensure_ascii=False)


def completion_text(text: RequestText) -> str | None:
    """The generated text, or None when there is none (embeddings, errors, an answer that is not JSON)."""
    if text.route == "/v1/embeddings":
        return None
    data = b"".join(text.answer)
    if not text.stream:
        try:
            return _choice_text(json.loads(data), "message")
        except ValueError:
            return None
    pieces: list[str] = []
    for event in data.split(b"\n\n"):
        payload = event.removeprefix(b"data:").strip()
        if not payload.startswith(b"{"):
            continue  # [DONE], comments, keep-alives, a cut-off tail
        try:
            piece = _choice_text(json.loads(payload), "delta")
        except ValueError:
            continue
        if piece:
            pieces.append(piece)
    return "".join(pieces) if pieces else None


def _choice_text(body: Any, chat_key: str) -> str | None:
    """The text of the first choice: `choices[0].<message|delta>.content` (chat) or `choices[0].text`."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    message = choice.get(chat_key)
    value = message.get("content") if isinstance(message, dict) else choice.get("text")
    return value if isinstance(value, str) else None
