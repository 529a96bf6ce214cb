"""What the endpoint's HTTP server accepts, and for how long it waits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HttpLimits:
    max_url_bytes: int = 8 * 1024
    max_header_bytes: int = 32 * 1024  # all header lines together
    max_headers: int = 100
    max_body_bytes: int = 4 * 1024 * 1024
    header_timeout_s: float = 10.0  # from a request's first byte (or the connection) to the end of its headers
    body_timeout_s: float = 30.0  # from the end of the headers to the end of the body
    keep_alive_s: float = 30.0  # an idle connection between requests
    max_pipelined: int = 16  # requests read ahead of the one being answered; the next gets a 503, then the close
    max_connections: int = 1024  # open at once; at the cap the longest idle one makes room (connection_cap.py)
    shutdown_grace_s: float = 2.0
