"""The process that renders chat templates for app.service.gateway.templates: one JSON request a line on stdin, one JSON
answer a line on stdout, until stdin closes.

Chat templates come from model files, so they are hostile input: rendered only in Jinja's immutable sandbox,
here in a process of its own, with its memory capped, so that a template looping `range(99999)` inside
`range(99999)` or multiplying a string a billion times costs this process, which the service kills after a
time limit, never the service's event loop. Every failure is answered as a problem text, never a traceback.
"""

from __future__ import annotations

import json
import operator
import sys
from typing import Any, NoReturn

import jinja2
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_OUTPUT_CHARS = 16 * 1024 * 1024  # a 4 MiB request body, rendered, with room for the template's text
MEMORY_LIMIT_BYTES = 1 << 30


class _OutputTooLarge(Exception):
    pass


class _Refused(jinja2.TemplateError):
    """The template's own `raise_exception`: it refuses the conversation (roles out of order, ...)."""


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, where repeating a string or a list is refused past the output limit before the
    repetition is allocated."""

    intercepted_binops = frozenset({"*"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "*":
            for sequence, times in ((left, right), (right, left)):
                sized = isinstance(sequence, str | list | tuple) and isinstance(times, int)
                if sized and len(sequence) * times > MAX_OUTPUT_CHARS:
                    raise _OutputTooLarge
            return operator.mul(left, right)
        return super().call_binop(context, operator_name, left, right)


def _raise(message: str) -> NoReturn:
    raise _Refused(message)


def _compile(template: str, cache: dict[str, jinja2.Template]) -> jinja2.Template:
    compiled = cache.get(template)
    if compiled is None:
        if len(cache) >= 16:
            cache.clear()
        compiled = cache[template] = _BoundedSandbox(trim_blocks=True, lstrip_blocks=True).from_string(template)
    return compiled


def render(template: str, messages: Any, cache: dict[str, jinja2.Template]) -> dict[str, str]:
    """{"text": ...} or {"problem": ..., "kind": ...}: "refused" (the template refuses the conversation), "broken"
    (it fails whatever the conversation), "security" (the sandbox refused it), "limit" (too large, too deep).
    bos/eos strings are left empty: templates that print them count one token less than the engine does."""
    try:
        pieces, size = [], 0
        stream = _compile(template, cache).generate(
            messages=messages, add_generation_prompt=True, bos_token="", eos_token="", raise_exception=_raise
        )
        for piece in stream:
            size += len(piece)
            if size > MAX_OUTPUT_CHARS:
                raise _OutputTooLarge
            pieces.append(piece)
        return {"text": "".join(pieces)}
    except _Refused as exc:
        return {"kind": "refused", "problem": str(exc) or "no reason given"}
    except SecurityError as exc:
        return {"kind": "security", "problem": f"the sandbox refused it: {exc}"}
    except (_OutputTooLarge, MemoryError):
        return {"kind": "limit", "problem": f"it renders more than {MAX_OUTPUT_CHARS} characters"}
    except RecursionError:
        return {"kind": "limit", "problem": "it recurses too deeply"}
    except Exception as exc:  # TemplateSyntaxError, OverflowError, TypeError: whatever a template can raise
        return {"kind": "broken", "problem": f"{exc.__class__.__name__}: {exc}"}


def _limit_memory() -> None:
    try:
        import resource
    except ImportError:  # Windows: the time limit still holds
        return
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def main() -> None:
    _limit_memory()
    sys.stdout.write('{"ready": true}\n')  # imports done: a render's time limit starts after this
    sys.stdout.flush()
    cache: dict[str, jinja2.Template] = {}
    for line in sys.stdin:
        try:
            request = json.loads(line)
            answer = render(str(request["template"]), request["messages"], cache)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            answer = {"kind": "broken", "problem": f"unreadable render request ({exc.__class__.__name__})"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
