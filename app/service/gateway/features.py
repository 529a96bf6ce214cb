"""OpenAI request features said in the words of the engine that serves the model.

The GGUF engines take the same features under different names: llama-server reads `response_format` of type
`json_schema` as OpenAI writes it, llama-cpp-python only knows `json_object`, with the schema beside the type. Each
engine's translation is one function in `_TRANSLATIONS`; an engine without one gets the body unchanged. What an
engine cannot do at all is refused with a 400 that names the engine that would serve it. The feature table in
docs/ENGINES.md ("OpenAI features by engine") says what each engine does with each feature, as tried on the pinned
versions.

The gateway calls `adapt` once per request, and only when the body has one of `FIELDS`, or a chat message whose
content is not a string or whose role is `developer`: other bodies pass as bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.service.gateway.validation import InvalidRequest, is_token_input
from engines.base import Capabilities

CHAT = "/v1/chat/completions"
EMBEDDINGS = "/v1/embeddings"
FIELDS = ("response_format", "logprobs", "top_logprobs", "max_completion_tokens")
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema")
# The engine that serves what llama-cpp-python cannot (`logprobs`, token ids as embedding input) for the same GGUF
# file, once the model is started with `engine`.
FULLER_ENGINE = "llama-server"


class FeatureRefused(InvalidRequest):
    """The serving engine cannot do what the request asks; the message names the engine that would."""


def drop_nulls(path: str, payload: dict[str, Any]) -> bool:
    """Leave out the fields sent as null, OpenAI's "the default" (and the openai SDK's way of writing an assistant
    message it read back: `tool_calls: None`), which the engines answer with a 500: llama-cpp-python at the top
    level and in messages, llama-server for a message's `name`. A message's null content stays: it is a translation
    of its own (`_plain_messages`). True when one was left out (the caller encodes the body again)."""
    changed = None in payload.values()
    if changed:
        for name in [name for name, value in payload.items() if value is None]:
            del payload[name]
    if path == CHAT:
        for message in payload["messages"]:
            nulls = [name for name, value in message.items() if value is None and name != "content"]
            for name in nulls:
                del message[name]
            changed = changed or bool(nulls)
    return changed


def has_features(path: str, payload: dict[str, Any]) -> bool:
    """Whether `adapt` has anything to do: a few dict lookups and a look at each chat message, cheap enough for
    every request (a few microseconds for ten messages of any length; searching the body's bytes for the same took
    four times as long on a 4 KB body, and grows with it)."""
    if any(field in payload for field in FIELDS):
        return True
    if path == EMBEDDINGS:
        return is_token_input(payload["input"])
    return path == CHAT and not all(
        type(message.get("content")) is str and message["role"] != "developer" for message in payload["messages"]
    )


def adapt(engine: str, capabilities: Capabilities, path: str, payload: dict[str, Any]) -> bool:
    """Rewrite `payload` in place for `engine`; True when it changed (the caller encodes it again).

    Raises InvalidRequest for a malformed `response_format`, FeatureRefused for what `engine` cannot serve."""
    response_format = payload.get("response_format")
    if response_format is not None:
        _check_response_format(response_format)
    if _asks_logprobs(path, payload) and not capabilities.logprobs:
        raise _served_elsewhere("`logprobs` is", engine, "logprobs")
    if path == EMBEDDINGS and not capabilities.token_inputs and is_token_input(payload["input"]):
        raise _served_elsewhere("Token ids as `input` are", engine, "input")
    if path == CHAT and not capabilities.media_parts:
        _refuse_media(engine, payload["messages"])
    translate = _TRANSLATIONS.get(engine)
    return translate(payload) if translate is not None else False


def _served_elsewhere(what: str, engine: str, param: str) -> FeatureRefused:
    """The refusal of what `engine` cannot do and llama-server can, with how to get there."""
    return FeatureRefused(
        f"{what} not available for models served by {engine}. {FULLER_ENGINE} serves them: start the model on it "
        f'(POST /api/models/ID/start with {{"engine": "{FULLER_ENGINE}"}}). Not installed yet? '
        f"`modeldeck engines build {FULLER_ENGINE}` builds it once from the pinned sources (about 10 minutes on 2 "
        "cores).",
        param,
    )


def _refuse_media(engine: str, messages: list[dict[str, Any]]) -> None:
    for index, message in enumerate(messages):
        content = message.get("content")
        for number, part in enumerate(content if isinstance(content, list) else ()):
            if part["type"] != "text":
                raise FeatureRefused(
                    f"`messages[{index}].content[{number}]` is of type `{part['type']}`, and models served by {engine} "
                    "take text only: ModelDeck starts GGUF models without a vision or audio projector (mmproj).",
                    f"messages[{index}].content[{number}]",
                )


def _asks_logprobs(path: str, payload: dict[str, Any]) -> bool:
    if path == "/v1/completions":  # an integer there: 0 still asks for the chosen token's logprob
        return payload.get("logprobs") is not None
    return bool(payload.get("logprobs")) or bool(payload.get("top_logprobs"))


def _check_response_format(value: Any) -> None:
    """OpenAI's shape of a `json_schema` format; other types are the engine's to accept (vLLM has more)."""
    if not isinstance(value.get("type"), str):
        raise InvalidRequest("`response_format.type` must be a string.", "response_format")
    if value["type"] != "json_schema":
        return
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise InvalidRequest("`response_format.json_schema` must be an object.", "response_format")
    if not isinstance(spec.get("schema", {}), dict):
        raise InvalidRequest("`response_format.json_schema.schema` must be an object.", "response_format")


def _llama_cpp_python(payload: dict[str, Any]) -> bool:
    """llama-cpp-python 0.3.36 answers `json_schema` with a 500 (it takes the schema under `json_object`), ignores
    `max_completion_tokens` (it reads `max_tokens` only), answers the `developer` role with a 500, and gives chat
    messages to the model's chat template as they come, where most templates fail on content that is a list of parts
    or left out (an assistant's tool calls)."""
    changed = False
    response_format = payload.get("response_format")
    if response_format is not None and response_format["type"] not in RESPONSE_FORMAT_TYPES:
        raise InvalidRequest(
            f"`response_format.type` must be one of {', '.join(RESPONSE_FORMAT_TYPES)} for llama-cpp-python.",
            "response_format",
        )
    if response_format is not None and response_format["type"] == "json_schema":
        schema = response_format["json_schema"].get("schema")
        payload["response_format"] = {"type": "json_object", **({"schema": schema} if schema is not None else {})}
        changed = True
    limit = payload.pop("max_completion_tokens", None)
    if limit is not None:
        payload.setdefault("max_tokens", limit)  # `max_tokens` wins where a client sends both, as in OpenAI's API
        changed = True
    if "messages" in payload and _plain_messages(payload["messages"]):
        changed = True
    return changed


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of the chat messages as both GGUF engines give them to the model's chat template: llama-server reads
    them so itself, and llama-cpp-python gets them so from `adapt`."""
    plain = [dict(message) for message in messages]
    _plain_messages(plain)
    return plain


def _plain_messages(messages: list[dict[str, Any]]) -> bool:
    """Each message as llama-server gives it to the chat template: `developer` as `system`, as OpenAI reads it for
    models without that role; the content one string, text parts joined with newlines (others were refused by
    `_refuse_media`), a left-out content empty. True when one changed."""
    changed = False
    for message in messages:
        if message["role"] == "developer":
            message["role"] = "system"
            changed = True
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = "\n".join(part["text"] for part in content)
            changed = True
        elif content is None:
            message["content"] = ""
            changed = True
    return changed


_TRANSLATIONS: dict[str, Callable[[dict[str, Any]], bool]] = {"llama-cpp-python": _llama_cpp_python}
