"""Ollama's /api/chat and /api/generate requests, written as the OpenAI requests the endpoint's core serves.

Every answer is asked of the core as a stream, streamed to the client or not: only a stream says when its first
token came, which Ollama's prompt and generation durations are measured from.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from app.service.dialects.ollama_options import BadRequest, KeepAlive, is_whole, keep_alive, sampling_fields

CHAT_PATH, COMPLETIONS_PATH = "/v1/chat/completions", "/v1/completions"
_ROLES = frozenset({"system", "user", "assistant", "tool"})
_IMAGE_TYPES = ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"))


@dataclass(frozen=True)
class CoreRequest:
    """What to ask the core: `payload` to `path`; `model` as the service names it; `stream` as the client asked;
    `load_only`: no prompt at all, Ollama's way to load (or, with keep_alive 0, unload) a model."""

    path: str
    payload: dict[str, Any]
    model: str
    stream: bool
    keep_alive: KeepAlive | None
    load_only: bool = False


def model_name(body: dict[str, Any]) -> str:
    """The `model` a request names, checked to be a string; Ollama's default tag `:latest` is left out."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("`model` is required: one of the names GET /api/tags lists.")
    return model.removesuffix(":latest")


def _stream(body: dict[str, Any]) -> bool:
    stream = body.get("stream", True)  # Ollama streams unless told not to
    if stream is None:
        return True
    if not isinstance(stream, bool):
        raise BadRequest("`stream` must be true or false.")
    return stream


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"`{name}` must be a string.")
    return value


def _refuse_unserved(body: dict[str, Any]) -> None:
    """Fields whose meaning the core cannot give: refused rather than silently lost."""
    think = body.get("think")
    if think not in (None, False):
        raise BadRequest("`think`: the models ModelDeck serves here do not think apart from their answer.")
    if body.get("template"):
        raise BadRequest("`template`: ModelDeck renders the model's own chat template; send `raw` true instead.")
    if body.get("context"):
        raise BadRequest("`context` (token ids of an earlier answer) is not taken: send the conversation to /api/chat.")
    if body.get("logprobs") not in (None, False):
        raise BadRequest("`logprobs` is not served on Ollama's API here; use /v1/chat/completions.")


def response_format(value: Any) -> dict[str, Any] | None:
    """Ollama's `format`: "json", a JSON schema, or nothing."""
    if value is None or value == "":
        return None
    if value == "json":
        return {"type": "json_object"}
    if isinstance(value, dict):
        return {"type": "json_schema", "json_schema": {"name": "format", "schema": value}}
    raise BadRequest('`format` must be "json" or a JSON schema (an object).')


def _common(body: dict[str, Any], model: str, context: int | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": model, "stream": True, "stream_options": {"include_usage": True}}
    payload.update(sampling_fields(body.get("options"), context))
    return payload


def _image_url(image: Any, where: str) -> dict[str, Any]:
    """A base64 image, as an OpenAI image_url part with a data URL of its type (PNG, JPEG, GIF, WebP)."""
    if not isinstance(image, str):
        raise BadRequest(f"`{where}` must be a list of base64 strings.")
    try:
        head = base64.b64decode(image[:64] + "=" * (-len(image[:64]) % 4), validate=True)
        base64.b64decode(image, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(f"`{where}` holds an image that is not base64.") from None
    kind = next((mime for magic, mime in _IMAGE_TYPES if head.startswith(magic)), None)
    if kind is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        kind = "image/webp"
    return {"type": "image_url", "image_url": {"url": f"data:{kind or 'image/jpeg'};base64,{image}"}}


def _content(content: str | None, images: Any, where: str) -> Any:
    if images is None or images == []:
        return content or ""
    if not isinstance(images, list):
        raise BadRequest(f"`{where}.images` must be a list of base64 strings.")
    parts: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
    return parts + [_image_url(image, f"{where}.images") for image in images]


def _tool_calls(calls: Any, turn: int, ids: dict[str, str]) -> list[dict[str, Any]]:
    """Ollama's tool calls (arguments an object) as OpenAI's (arguments a JSON string, each with an id of its own);
    `ids` learns each function's latest id, and "" the latest of all, for the tool messages that answer them."""
    where = f"messages[{turn}]"
    if not isinstance(calls, list):
        raise BadRequest(f"`{where}.tool_calls` must be a list.")
    written = []
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments", {}) if isinstance(function, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, dict | str):
            raise BadRequest(f'`{where}.tool_calls[{index}]` must be {{"function": {{"name", "arguments"}}}}.')
        call_id = ids[name] = ids[""] = f"call_{turn}_{index}"
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        written.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}})
    return written


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's."""
    if not isinstance(messages, list):
        raise BadRequest("`messages` must be a list of {role, content} objects.")
    written: list[dict[str, Any]] = []
    ids: dict[str, str] = {}
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise BadRequest(f"`{where}` must be an object with `role` and `content`.")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise BadRequest(f"`{where}.role` must be one of {', '.join(sorted(_ROLES))}.")
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"`{where}.content` must be a string.")
        out: dict[str, Any] = {"role": role, "content": _content(content, message.get("images"), where)}
        if role == "assistant" and message.get("tool_calls"):
            out["tool_calls"] = _tool_calls(message["tool_calls"], index, ids)
        if role == "tool":
            name = message.get("tool_name") or message.get("name")
            if name is not None and not isinstance(name, str):
                raise BadRequest(f"`{where}.tool_name` must be a string.")
            out["tool_call_id"] = ids.get(name or "", ids.get("", "call_0"))  # Ollama ties answers by name only
        written.append(out)
    return written


def chat_request(body: dict[str, Any], context: int | None) -> CoreRequest:
    """POST /api/chat."""
    model, stream = model_name(body), _stream(body)
    _refuse_unserved(body)
    alive = keep_alive(body.get("keep_alive"))
    messages = body.get("messages")
    if messages is None or messages == []:
        return CoreRequest(CHAT_PATH, {}, model, stream, alive, load_only=True)
    payload = _common(body, model, context)
    payload["messages"] = chat_messages(messages)
    tools = body.get("tools")
    if tools:
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            raise BadRequest("`tools` must be a list of {type, function} objects.")
        payload["tools"] = tools
    answer_format = response_format(body.get("format"))
    if answer_format is not None:
        payload["response_format"] = answer_format
    return CoreRequest(CHAT_PATH, payload, model, stream, alive)


def generate_request(body: dict[str, Any], context: int | None) -> CoreRequest:
    """POST /api/generate: the model's chat template unless `raw` (or a `suffix`, to fill in the middle), which
    go to the core's completions as they are."""
    model, stream = model_name(body), _stream(body)
    _refuse_unserved(body)
    alive = keep_alive(body.get("keep_alive"))
    prompt, system, suffix = _text(body, "prompt"), _text(body, "system"), _text(body, "suffix")
    raw = body.get("raw", False)
    if raw is not None and not isinstance(raw, bool):
        raise BadRequest("`raw` must be true or false.")
    if not prompt and not suffix and not body.get("images"):
        return CoreRequest(CHAT_PATH, {}, model, stream, alive, load_only=True)
    payload = _common(body, model, context)
    answer_format = response_format(body.get("format"))
    if raw or suffix:
        if body.get("images"):
            raise BadRequest("`images` need the model's chat template: leave `raw` and `suffix` out.")
        if answer_format is not None:
            raise BadRequest("`format` needs the model's chat template: leave `raw` and `suffix` out.")
        payload["prompt"] = prompt or ""
        if context is not None:  # Ollama's default is no limit; llama-cpp-python's completions stop at 16 tokens
            payload.setdefault("max_tokens", context)  # it ends at the context whatever the prompt took
        if suffix:
            payload["suffix"] = suffix
        return CoreRequest(COMPLETIONS_PATH, payload, model, stream, alive)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": _content(prompt, body.get("images"), "prompt")})
    payload["messages"] = messages
    if answer_format is not None:
        payload["response_format"] = answer_format
    return CoreRequest(CHAT_PATH, payload, model, stream, alive)


def embed_inputs(body: dict[str, Any], old: bool) -> tuple[str, list[str] | str]:
    """The model and input of /api/embed (`input`: a string or a list of them) or the older /api/embeddings
    (`prompt`, one string)."""
    model = model_name(body)
    if body.get("dimensions") is not None:
        raise BadRequest("`dimensions` is not taken: the engines answer the model's own size; truncate it yourself.")
    if old:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise BadRequest("`prompt` must be a string.")
        return model, prompt
    given = body.get("input")
    if isinstance(given, str) or (isinstance(given, list) and given and all(isinstance(i, str) for i in given)):
        return model, given
    if is_whole(given) or (isinstance(given, list) and given and all(is_whole(i) for i in given)):
        raise BadRequest("`input` as token ids is not taken yet: send text.")
    raise BadRequest("`input` must be a string or a non-empty list of strings.")
