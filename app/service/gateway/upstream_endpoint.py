"""Where a request to an engine goes, the bounds on its answer, and how it fails: what the gateway and its upstream
client (app.service.gateway.upstream) share."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from app.service.launch.route import Route


@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """Bounds on an answer from a server ModelDeck did not start (`--remote`, `--upstream`): its size, and how
    long it may go silent or take in all. Engines ModelDeck runs on loopback are trusted to end their answers."""

    max_head_bytes: int = 64 * 1024
    max_bytes: int = 256 * 1024 * 1024  # head and body: a long completion, or 2048 embeddings of 4096 floats
    idle_s: float = 300.0  # no byte at all: a non-streamed answer's head comes when it is done
    total_s: float = 3600.0


REMOTE_LIMITS = AnswerLimits()


class UpstreamError(Exception):
    """The engine could not be reached, closed the connection early, or answered something that is not HTTP."""


class Unreachable(UpstreamError):
    """The engine did not take the request: no connection could be opened, or it was closed before any answer
    (as happens for a moment while a killed engine's sockets are torn down)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One route of one server, with the head of a POST to it prepared once."""

    host: str
    port: int
    head: bytes  # request line and headers up to `Content-Length: `
    tls: bool = False  # https: a remote endpoint (engines on loopback are plain http)
    limits: AnswerLimits | None = None  # None: an engine ModelDeck started

    @classmethod
    def post(cls, url: str, bearer: str, limits: AnswerLimits | None = None) -> Endpoint:
        """`bearer` "" sends no Authorization header (a remote that needs no key)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or parts.hostname is None:
            raise ValueError(f"not an http(s):// URL with a host: {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        host_header = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        authorization = f"Authorization: Bearer {bearer}\r\n" if bearer else ""
        head = (
            f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {host_header}:{port}\r\n{authorization}"
            "Content-Type: application/json\r\nAccept-Encoding: identity\r\nContent-Length: "
        )
        return cls(parts.hostname, port, head.encode("latin-1"), tls, limits)

    def request(self, body: bytes) -> bytes:
        return b"".join((self.head, b"%d\r\n\r\n" % len(body), body))


class EndpointCache:
    """The prepared endpoint of each route and path, made once per engine address and key."""

    def __init__(self) -> None:
        self._endpoints: dict[tuple[str, str], Endpoint] = {}  # (URL, bearer) -> prepared request head

    def __call__(self, route: Route, path: str) -> Endpoint:
        assert route.url is not None
        url = route.url + path
        endpoint = self._endpoints.get((url, route.bearer))
        if endpoint is None:
            if len(self._endpoints) > 256:  # engines restarted on new ports many times over
                self._endpoints.clear()
            # A server ModelDeck did not start (--remote, --upstream) gets size and time limits on its answers.
            limits = REMOTE_LIMITS if route.external else None
            endpoint = self._endpoints[(url, route.bearer)] = Endpoint.post(url, route.bearer, limits)
        return endpoint
