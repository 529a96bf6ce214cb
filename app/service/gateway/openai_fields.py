"""Every field of OpenAI's reference for the three core routes, and what the gateway does with each: one table that
validation reads and docs/OPENAI_FIELDS.md is generated from, so the accepted fields and their documentation cannot
drift apart. A field outside the table is a 400 naming it.

Fates: `honoured` goes to the engine as sent; `translated` goes in other words (said in the note); `ignored` has no
meaning locally and is dropped before the engine sees it (both GGUF engines reject or mis-read some of them:
llama-cpp-python's server forbids unknown fields);
`refused` is a 400 whose message says why and what to do. A check may refuse some values of an accepted field
(`store: true`, `n` above 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from app.service.gateway.validation import (
    Check,
    CheckedRequest,
    InvalidRequest,
    boolean,
    embedding_input,
    integer,
    logit_bias,
    messages,
    number,
    obj,
    only_one,
    stream_options,
    string,
    string_or_strings,
    tool_choice,
    tools,
)

Fate = Literal["honoured", "translated", "ignored", "refused"]
CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
REGENERATE = "python -m app.service.gateway.openai_fields > docs/OPENAI_FIELDS.md"


@dataclass(frozen=True)
class Field:
    """One request field: its check (the value's type and bounds), its fate, and what the docs say of it."""

    name: str
    fate: Fate
    check: Check
    note: str = ""
    openai: bool = True  # False: a local extension both GGUF engines read, not in OpenAI's reference


def _refuse(why: str) -> Check:
    return lambda value: why


def _store(value: Any) -> str | None:
    if value is False:
        return None
    return "asks to store the completion, and ModelDeck stores none: leave `store` out or send false"


def _modalities(value: Any) -> str | None:
    if value == ["text"]:
        return None
    return 'must be ["text"]: the served models write text only, no audio'


def _functions(value: Any) -> str | None:
    if not isinstance(value, list):
        return "must be an array of functions"
    return tools([{"type": "function", "function": function} for function in value])


def _function_call(value: Any) -> str | None:
    if value in ("none", "auto") or (isinstance(value, dict) and isinstance(value.get("name"), str)):
        return None
    return 'must be "none", "auto" or {"name": ...}'


def _encoding_format(value: Any) -> str | None:
    return None if value in ("float", "base64") else "must be `float` or `base64`"


_DROPPED = "dropped: no meaning on a local engine"
_SHARED: tuple[Field, ...] = (
    Field("model", "honoured", string, "the model's id in `GET /v1/models`"),
    Field("stream", "honoured", boolean),
    Field("stream_options", "honoured", stream_options, "`include_usage` is answered by the gateway where needed"),
    Field("temperature", "honoured", number(0, 2)),
    Field("top_p", "honoured", number(0, 1)),
    Field("n", "honoured", only_one, "1 only: the engines write one choice per request"),
    Field("stop", "honoured", string_or_strings(4)),
    Field("presence_penalty", "honoured", number(-2, 2)),
    Field("frequency_penalty", "honoured", number(-2, 2)),
    Field("seed", "honoured", integer(-(2**63), 2**64 - 1)),
    Field("logit_bias", "honoured", logit_bias),
    Field("user", "ignored", string, _DROPPED),
    Field("top_k", "honoured", integer(0, 1000), "llama.cpp sampling", openai=False),
    Field("min_p", "honoured", number(0, 1), "llama.cpp sampling", openai=False),
    Field("repeat_penalty", "honoured", number(0, 10), "llama.cpp sampling", openai=False),
)

TABLE: dict[str, tuple[Field, ...]] = {
    CHAT: (
        Field("messages", "honoured", messages, "`developer` is given to the template as `system`"),
        *_SHARED,
        Field("max_tokens", "honoured", integer(1, 2**31)),
        Field("max_completion_tokens", "translated", integer(1, 2**31), "to `max_tokens` for llama-cpp-python"),
        Field("logprobs", "honoured", boolean, "on llama-server; refused naming it on llama-cpp-python"),
        Field("top_logprobs", "honoured", integer(0, 20), "as `logprobs`"),
        Field(
            "response_format", "translated", obj, "`json_schema` to `json_object` with a schema for llama-cpp-python"
        ),
        Field(
            "tools",
            "translated",
            tools,
            "described in a system message where the chat template renders none; calls answered as `tool_calls`",
        ),
        Field(
            "tool_choice",
            "translated",
            tool_choice,
            "`required` and a named function: constrained to a valid call by a JSON schema; `none`: tools not offered",
        ),
        Field(
            "parallel_tool_calls",
            "honoured",
            boolean,
            "false: at most one call (a forced call is always one)",
        ),
        Field("functions", "translated", _functions, "legacy: to `tools`, calls answered as `function_call`"),
        Field("function_call", "translated", _function_call, "legacy: to `tool_choice`"),
        Field("store", "ignored", _store, "false dropped; true refused: nothing is stored"),
        Field("metadata", "ignored", obj, _DROPPED),
        Field("service_tier", "ignored", string, _DROPPED),
        Field("prompt_cache_key", "ignored", string, _DROPPED + " (the engine caches prompts by itself)"),
        Field("prompt_cache_retention", "ignored", string, _DROPPED),
        Field("safety_identifier", "ignored", string, _DROPPED),
        Field("reasoning_effort", "ignored", string, "dropped: the engines have no reasoning budget to set"),
        Field("verbosity", "ignored", string, _DROPPED),
        Field("modalities", "ignored", _modalities, '["text"] dropped; audio refused'),
        Field(
            "audio",
            "refused",
            _refuse("asks for audio output, and the served models write text only"),
            "no audio output: leave it out",
        ),
        Field(
            "prediction",
            "refused",
            _refuse("(predicted outputs) is not supported by the local engines: leave it out"),
            "predicted outputs: no engine support",
        ),
        Field(
            "web_search_options",
            "refused",
            _refuse("asks for web search, which a local model cannot do: leave it out"),
            "no web search locally",
        ),
    ),
    COMPLETIONS: (
        Field("prompt", "honoured", string_or_strings(1, empty=False), "one string or a list of one"),
        *_SHARED,
        Field("suffix", "honoured", string),
        Field("max_tokens", "honoured", integer(1, 2**31)),
        Field("echo", "honoured", boolean),
        Field("logprobs", "honoured", integer(0, 5), "on llama-server; refused naming it on llama-cpp-python"),
        Field("best_of", "honoured", only_one, "1 only"),
    ),
    EMBEDDINGS: (
        Field("model", "honoured", string),
        Field(
            "input", "honoured", embedding_input(2048), "text; token ids on llama-server, refused on llama-cpp-python"
        ),
        Field(
            "encoding_format", "honoured", _encoding_format, "`base64` encoded by the gateway (little-endian float32)"
        ),
        Field("user", "ignored", string, _DROPPED),
        Field(
            "dimensions",
            "refused",
            _refuse("is not supported yet: leave it out and truncate the vectors yourself"),
            "not yet: truncate client-side",
        ),
    ),
}
FIELDS: dict[str, dict[str, Field]] = {route: {f.name: f for f in fields} for route, fields in TABLE.items()}
DROPPED: dict[str, frozenset[str]] = {
    route: frozenset(f.name for f in fields if f.fate == "ignored") for route, fields in TABLE.items()
}
REQUIRED: dict[str, tuple[str, ...]] = {CHAT: ("model", "messages"), COMPLETIONS: ("model", "prompt"),
                                        EMBEDDINGS: ("model", "input")}  # fmt: skip


def check_request(route: str, body: Any, context_length: Callable[[str], int | None]) -> CheckedRequest:
    """Validate `body` for `route` against TABLE; `context_length(model)` bounds max_tokens. Raises InvalidRequest."""
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    fields = FIELDS[route]
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise InvalidRequest(f"Unknown field `{unknown[0]}` for {route}.", unknown[0])
    for name in REQUIRED[route]:
        if name not in body:
            raise InvalidRequest(f"`{name}` is required.", name)
    for name, value in body.items():
        if value is None and name not in REQUIRED[route]:
            continue
        problem = fields[name].check(value)
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


def normalise(route: str, payload: dict[str, Any]) -> bool:
    """Drop the ignored fields, in place; True when the body changed. The legacy `functions` and `function_call`
    are said in today's words with the tools (app.service.gateway.tool_calls), which answers them in their own."""
    dropped = [name for name in payload if name in DROPPED[route]]
    for name in dropped:
        del payload[name]
    return bool(dropped)


def markdown() -> str:
    """docs/OPENAI_FIELDS.md, from TABLE."""
    lines = [
        "# OpenAI request fields",
        "",
        "What the endpoint does with each field of OpenAI's reference. Generated from",
        f"`app/service/gateway/openai_fields.py`; regenerate with `{REGENERATE}`. A field not listed is a 400 naming",
        "it. `ignored` fields are dropped before the engine sees them; `refused` ones are a 400 saying why.",
    ]
    for route, fields in TABLE.items():
        lines += ["", f"## `{route}`", "", "| Field | What happens | Note |", "| --- | --- | --- |"]
        for field in fields:
            extension = " (extension)" if not field.openai else ""
            lines.append(f"| `{field.name}`{extension} | {field.fate} | {field.note} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
