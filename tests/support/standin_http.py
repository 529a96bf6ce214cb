"""Small stand-in HTTP servers for tests: an upstream ModelDeck serves, a package index, a newer service. Each test
writes the handler that misbehaves as it needs; serving it and answering with a body are shared here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class StandInHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (the test reads what its client says) and answers with a whole body."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_body(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, answer: object) -> None:
        self.send_body(status, json.dumps(answer).encode())


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """The base URL of `handler` served on 127.0.0.1 and a free port, on a thread, until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
