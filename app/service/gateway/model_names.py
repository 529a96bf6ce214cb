"""Answers name the model the client asked for, although the server behind the gateway knows it by another id
(a remote's `NAME/MODEL` is `MODEL` there). Only the `"model"` fields are rewritten, as bytes, one SSE event at
a time; the rest passes unchanged."""

from __future__ import annotations

import json
import re


class ModelRename:
    """Rewrites `"model": "<upstream id>"` to `"model": "<asked id>"` in one answer, whole or streamed."""

    def __init__(self, upstream: str, asked: str) -> None:
        self._pattern = re.compile(rb'("model"\s*:\s*)' + re.escape(json.dumps(upstream).encode()))
        self._asked = json.dumps(asked).encode()
        self._pending = b""  # the start of an event whose end has not arrived

    def _sub(self, data: bytes) -> bytes:
        return self._pattern.sub(lambda match: match.group(1) + self._asked, data)

    def whole(self, answer: bytes) -> bytes:
        return self._sub(answer)

    def feed(self, chunk: bytes) -> bytes:
        """The complete lines of the stream so far, renamed; an unfinished line waits for its end (a read may
        split a field in two)."""
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        self._pending = data[cut:]
        return self._sub(data[:cut])

    def flush(self) -> bytes:
        """What is left at the end of the stream."""
        rest, self._pending = self._pending, b""
        return self._sub(rest)
