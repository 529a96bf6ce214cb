"""Ollama's `options` and `keep_alive`, in the words of the endpoint's OpenAI core.

The sampling options a request can set on these engines become OpenAI's fields (or the core's llama.cpp
extensions). `num_ctx` is checked, never applied: the engine's context is set when it loads, so a request may ask for
at most that context. The rest of Ollama's options are set at load time or name samplers the core does not take,
and are ignored, as Ollama itself ignores an option it does not know:

- load time, fixed by ModelDeck's launch plan: numa, num_batch, num_gpu, main_gpu, low_vram, f16_kv, logits_all,
  vocab_only, use_mmap, use_mlock, embedding_only, num_thread, num_gqa, rope_frequency_base, rope_frequency_scale;
- samplers the core does not take: num_keep, tfs_z, typical_p, repeat_last_n, mirostat, mirostat_tau,
  mirostat_eta, penalize_newline.

A known option of the wrong type is a 400 naming it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

IGNORED_OPTIONS = frozenset(
    {
        "numa", "num_batch", "num_gpu", "main_gpu", "low_vram", "f16_kv", "logits_all", "vocab_only", "use_mmap",
        "use_mlock", "embedding_only", "num_thread", "num_gqa", "rope_frequency_base", "rope_frequency_scale",
        "num_keep", "tfs_z", "typical_p", "repeat_last_n", "mirostat", "mirostat_tau", "mirostat_eta",
        "penalize_newline",
    }
)  # fmt: skip
_WHOLE = {"seed": "seed", "top_k": "top_k"}
_NUMBER = {
    "temperature": "temperature",
    "top_p": "top_p",
    "min_p": "min_p",
    "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class BadRequest(ValueError):
    """A request the dialect refuses: `status` and a sentence saying why."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return (is_whole(value) or isinstance(value, float)) and math.isfinite(value)


def sampling_fields(options: Any, context: int | None) -> dict[str, Any]:
    """The OpenAI fields `options` asks for; BadRequest for a known option of the wrong type, or a `num_ctx` over
    the model's context (`context`, None when unknown)."""
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise BadRequest("`options` must be an object.")
    fields: dict[str, Any] = {}
    for name, value in options.items():
        if value is None or name in IGNORED_OPTIONS:
            continue
        if name in _WHOLE:
            if not is_whole(value):
                raise BadRequest(f"option `{name}` must be a whole number.")
            fields[_WHOLE[name]] = value
        elif name in _NUMBER:
            if not is_number(value):
                raise BadRequest(f"option `{name}` must be a number.")
            fields[_NUMBER[name]] = value
        elif name == "num_predict":
            fields.update(_max_tokens(value, context))
        elif name == "stop":
            fields["stop"] = _stop(value)
        elif name == "num_ctx":
            _check_num_ctx(value, context)
    return fields


def _max_tokens(value: Any, context: int | None) -> dict[str, Any]:
    """num_predict -1 (no limit) and -2 (fill the context) leave max_tokens out: the answer ends at the context (see
    ollama_request for completions). Over the context it is the context, where Ollama's answer would stop too; the
    core refuses a max_tokens over it."""
    if not is_whole(value) or value < -2 or value == 0:
        raise BadRequest("option `num_predict` must be a whole number above 0, or -1 (no limit) or -2 (the context).")
    if value < 0:
        return {}
    return {"max_tokens": min(value, context) if context is not None else value}


def _stop(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadRequest("option `stop` must be a list of strings.")
    return value


def _check_num_ctx(value: Any, context: int | None) -> None:
    if not is_whole(value) or value < 1:
        raise BadRequest("option `num_ctx` must be a whole number above 0.")
    if context is not None and value > context:
        raise BadRequest(
            f"option `num_ctx` {value} is over the model's context of {context} tokens: ModelDeck sets the context "
            "when the engine loads (the model's launch settings), not per request."
        )


@dataclass(frozen=True)
class KeepAlive:
    """How long the model should stay loaded after this request: `seconds` None for forever, 0 to unload."""

    seconds: float | None


def keep_alive(value: Any) -> KeepAlive | None:
    """Ollama's keep_alive: a number of seconds or a Go duration ("5m", "1h30m", "300ms"), negative for forever;
    None when the request leaves it out. BadRequest for anything else."""
    if value is None:
        return None
    if is_number(value):
        seconds = float(value)
    elif isinstance(value, str) and len(value) <= 64:
        seconds = _duration(value.strip())
    else:
        raise BadRequest('`keep_alive` must be a number of seconds or a duration such as "5m".')
    return KeepAlive(None if seconds < 0 else seconds)


def _duration(text: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    try:
        seconds = float(body)  # a bare number: seconds
    except ValueError:
        seconds = None
    if seconds is not None:
        if not math.isfinite(seconds):
            raise BadRequest(f"`keep_alive` {text!r} is not a duration.")
        return sign * seconds
    parts = _DURATION_PART.findall(body)
    if not body or "".join(number + unit for number, unit in parts) != body:
        raise BadRequest(f'`keep_alive` {text!r} is not a duration such as "5m", "1h30m" or "-1".')
    return sign * sum(float(number) * _UNIT_S[unit] for number, unit in parts)
