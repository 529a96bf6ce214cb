"""A stand-in for a newer ModelDeck service: its control API reports a model state this client does not know.

A real service cannot be made to report a state that does not exist, so a tiny loopback HTTP server answers
GET /api/models and GET /api/events (one snapshot, then the stream ends) with the state `warming`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.client import ServiceAddress

UNKNOWN_STATE = "warming"
_MODEL = {"id": "m", "state": UNKNOWN_STATE, "embedding_companion": None}


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/api/models":
            body, content_type = json.dumps([_MODEL]).encode(), "application/json"
        elif self.path == "/api/events":
            body = b"data: " + json.dumps({"type": "snapshot", "models": [_MODEL]}).encode() + b"\n\n"
            content_type = "text/event-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the test output stays readable; failures show in the assertions


@contextmanager
def newer_service() -> Iterator[ServiceAddress]:
    """The stand-in's address, served on a thread until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ServiceAddress(0, "", f"http://127.0.0.1:{server.server_address[1]}", "token")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
