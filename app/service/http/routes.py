"""Which methods each path of an API takes, for what HTTP asks of a router beyond finding the handler: a wrong
method on a known path is a 405 with an `Allow` header, and HEAD is answered as GET without the body
(RFC 9110, 9.3.2 and 15.5.6)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.service.http.asgi import Message, Send, send_error

# A method and a path pattern: "/api/models/{}/logs"; `{}` one segment, `{...}` one or more.
RoutePattern = tuple[str, str]
_ORDER = ("GET", "HEAD", "POST", "PUT", "DELETE")


class RouteTable:
    """The routes of one API, as method and path pattern."""

    def __init__(self, routes: Iterable[RoutePattern]) -> None:
        self._routes = [(method, tuple(pattern.strip("/").split("/"))) for method, pattern in routes]

    def allowed(self, parts: Sequence[str]) -> list[str]:
        """The methods the path (split at "/") takes, HEAD wherever GET, in a fixed order; [] for an unknown path."""
        methods = {method for method, pattern in self._routes if _matches(pattern, parts)}
        if "GET" in methods:
            methods.add("HEAD")
        return sorted(methods, key=_ORDER.index)


def _matches(pattern: Sequence[str], parts: Sequence[str]) -> bool:
    if pattern and pattern[-1] == "{...}":
        fixed = pattern[:-1]
        return len(parts) > len(fixed) and all(p in ("{}", part) for p, part in zip(fixed, parts, strict=False))
    return len(parts) == len(pattern) and all(p in ("{}", part) for p, part in zip(pattern, parts, strict=True))


async def send_not_allowed(send: Send, method: str, path: str, allowed: Sequence[str]) -> None:
    """405 Method Not Allowed, with the methods the path takes in the `Allow` header and the message."""
    listed = ", ".join(allowed)
    message = f"Method {method} not allowed on {path}; it takes {listed}."
    await send_error(send, 405, message, "invalid_request_error", headers=[(b"allow", listed.encode())])


def head_only(send: Send) -> Send:
    """`send` for a HEAD request served as GET: the answer ends with its first body message, so that a stream
    (server-sent events) ends too instead of holding the connection. The server leaves the body out; a whole one
    still gives its length."""
    ended = False

    async def send_head(message: Message) -> None:
        nonlocal ended
        if ended:
            return
        if message["type"] == "http.response.body":
            ended = True
            if message.get("more_body", False):
                message = {"type": "http.response.body", "body": b""}
        await send(message)

    return send_head
