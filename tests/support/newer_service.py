"""A stand-in for a newer ModelDeck service: its control API reports a model state this client does not know.

A real service cannot be made to report a state that does not exist, so a tiny loopback HTTP server answers
GET /api/models and GET /api/events (one snapshot, then the stream ends) with the state `warming`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from app.client import ServiceAddress
from tests.support.standin_http import StandInHandler, serving

UNKNOWN_STATE = "warming"
_MODEL = {"id": "m", "state": UNKNOWN_STATE, "embedding_companion": None}


class _Handler(StandInHandler):
    def do_GET(self) -> None:
        if self.path == "/api/models":
            body, content_type = json.dumps([_MODEL]).encode(), "application/json"
        elif self.path == "/api/events":
            body = b"data: " + json.dumps({"type": "snapshot", "models": [_MODEL]}).encode() + b"\n\n"
            content_type = "text/event-stream"
        else:
            self.send_error(404)
            return
        self.send_body(200, body, content_type)


@contextmanager
def newer_service() -> Iterator[ServiceAddress]:
    """The stand-in's address, served on a thread until the block ends."""
    with serving(_Handler) as url:
        yield ServiceAddress(0, "", url, "token")
