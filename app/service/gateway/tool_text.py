"""Tool calls read out of a model's text as it arrives, in pieces that a whole answer and a stream both assemble:
content, the start of a call (its id and name), and pieces of a call's arguments.

Two forms: `forced`, where the whole text is one call as JSON `{"name": ..., "arguments": ...}` (decoded under the
schema of app.service.gateway.tool_calls), its arguments passed on as they are written; and `parsed`, text with
calls in the Hermes form `<tool_call>{json}</tool_call>`, each call passed on once its closing tag arrives (a call
that is not valid JSON naming an offered tool stays text).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Protocol

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
# The start of a forced call, up to its arguments: the schema puts `name` first, as both engines' grammars keep it.
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"arguments"\s*:\s*')


@dataclass(frozen=True)
class CallStart:
    """A call begins: OpenAI's first delta of a tool call carries its id and name."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class Text:
    """Content (`call` None) or a piece of the arguments of call `call`."""

    text: str
    call: int | None = None


Piece = CallStart | Text


class Extractor(Protocol):
    def feed(self, text: str) -> list[Piece]: ...

    def flush(self) -> list[Piece]: ...


def extractor(mode: str, names: frozenset[str], parallel: bool) -> Extractor:
    return ForcedCall() if mode == "forced" else HermesCalls(names, parallel)


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


class ForcedCall:
    """One call as JSON: its start once the name is read, then its arguments' text until their value closes."""

    def __init__(self) -> None:
        self._head = ""  # the text before the arguments, until the name is read
        self._started = False
        self._ended = False  # the arguments' value is complete: the rest (the object's `}`) is dropped
        self._depth = 0
        self._in_string = self._escaped = self._begun = False

    def feed(self, text: str) -> list[Piece]:
        if self._ended:
            return []
        if not self._started:
            self._head += text
            match = _HEAD.match(self._head)
            if match is None:
                return []
            self._started = True
            start = CallStart(0, _call_id(), json.loads(match.group(1)))
            rest, self._head = self._head[match.end() :], ""
            return [start, *self._arguments(rest)]
        return self._arguments(text)

    def _arguments(self, text: str) -> list[Piece]:
        kept = self._scan(text)
        return [Text(kept, 0)] if kept else []

    def _scan(self, text: str) -> str:
        """The part of `text` that belongs to the arguments' value, tracking its nesting and strings."""
        start = 0
        if not self._begun:
            start = len(text) - len(text.lstrip())
            if start == len(text):
                return ""
            self._begun = True
        for position in range(start, len(text)):
            char = text[position]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                    if self._depth == 0:
                        return self._end(text[start : position + 1])
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]" or (char == "," and self._depth == 0):
                if self._depth == 0:  # the call object closes after a number, true, false or null
                    return self._end(text[start:position].rstrip())
                self._depth -= 1
                if self._depth == 0:
                    return self._end(text[start : position + 1])
        return text[start:]

    def _end(self, kept: str) -> str:
        self._ended = True
        return kept

    def flush(self) -> list[Piece]:
        """The end of the text: a call whose head never matched is read whole, or stays text."""
        if self._started or not self._head:
            return []
        head, self._head = self._head, ""
        try:
            call = json.loads(head)
            name, arguments = call["name"], call["arguments"]
        except (ValueError, KeyError, TypeError, RecursionError):
            return [Text(head)]
        if not isinstance(name, str):
            return [Text(head)]
        return [CallStart(0, _call_id(), name), Text(json.dumps(arguments), 0)]


class HermesCalls:
    """Content passed on as it comes, except what may be the start of `<tool_call>`; each call whole once closed."""

    def __init__(self, names: frozenset[str], parallel: bool) -> None:
        self._names, self._parallel = names, parallel
        self._pending = ""  # held back: a possible start of the opening tag, or an open call
        self._space = ""  # held back: white space, no content if a call follows
        self._in_call = False
        self._calls = 0

    def feed(self, text: str) -> list[Piece]:
        self._pending += text
        pieces: list[Piece] = []
        while True:
            if self._in_call:
                end = self._pending.find(_CLOSE)
                if end < 0:
                    return pieces
                body, self._pending = self._pending[:end], self._pending[end + len(_CLOSE) :]
                self._in_call = False
                call = self._call(body)
                pieces += call if call is not None else self._text(_OPEN + body + _CLOSE)
                continue
            start = self._pending.find(_OPEN)
            if start < 0:
                keep = _partial_tag(self._pending)
                pieces += self._text(self._pending[: len(self._pending) - keep])
                self._pending = self._pending[len(self._pending) - keep :]
                return pieces
            pieces += self._text(self._pending[:start])
            self._pending = self._pending[start + len(_OPEN) :]
            self._in_call = True

    def _text(self, text: str) -> list[Piece]:
        """Content, but for white space at its end: held until more content comes, dropped when a call does."""
        body = text.rstrip()
        if not body:
            self._space += text
            return []
        written, self._space = self._space + body, text[len(body) :]
        return [Text(written)]

    def _call(self, body: str) -> list[Piece] | None:
        """The pieces of a call to an offered tool; None when `body` is not one (it stays text)."""
        try:
            call = json.loads(body)
            name, arguments = call["name"], call.get("arguments", call.get("parameters", {}))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            return None
        if not isinstance(name, str) or name not in self._names:
            return None
        self._space = ""
        if self._calls and not self._parallel:
            return []  # parallel_tool_calls false: the first call only
        index, self._calls = self._calls, self._calls + 1
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return [CallStart(index, _call_id(), name), Text(text, index)]

    def flush(self) -> list[Piece]:
        """The end of the text: a call left open (the model stopped before its closing tag) is read as it is."""
        rest, self._pending = self._pending, ""
        pieces: list[Piece] = []
        if self._in_call:
            self._in_call = False
            call = self._call(rest.strip())
            pieces, rest = (call, "") if call is not None else ([], _OPEN + rest)
        pieces += self._text(rest)
        if self._space and not self._calls:  # an answer without calls ends as the model wrote it
            pieces.append(Text(self._space))
        self._space = ""
        return pieces


def _partial_tag(text: str) -> int:
    """How many characters at the end of `text` could begin the opening tag."""
    for size in range(min(len(_OPEN) - 1, len(text)), 0, -1):
        if text.endswith(_OPEN[:size]):
            return size
    return 0
