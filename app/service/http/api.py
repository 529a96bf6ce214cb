"""What every control-API route module reads and refuses the same way: JSON bodies (a size limit, then the
nesting limit of app.bounded_json), query parameters, and refusals in the API's JSON error shape (OpenAI's:
`{"error": {"message", "type", "param", "code"}}`, plus any top-level fields a refusal carries)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote

from app.bounded_json import BadJson, LoneSurrogate, load_body, load_json, may_hold_surrogate
from app.service.http.asgi import BodyTooLarge, Receive, Scope, Send, openai_error, read_body, send_json

MAX_BODY = 16_384  # a control-API body: settings, a download, an import, a remote
MAX_SMALL_BODY = 4096  # a body of a few numbers: a start's launch overrides, a benchmark request

Query = dict[str, list[str]]


class ApiError(Exception):
    """A refused request: the status and the error the route answers with; `extra` adds top-level fields."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        param: str | None = None,
        kind: str = "invalid_request_error",
        **extra: Any,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.param, self.kind, self.extra = status, code, param, kind, extra

    def body(self) -> dict[str, Any]:
        return {**openai_error(str(self), self.kind, self.code, self.param), **self.extra}


async def send_api_error(send: Send, error: ApiError) -> None:
    await send_json(send, error.status, error.body())


def path_segments(scope: Scope) -> list[str]:
    """The request path's segments, each decoded on its own: an id sent with `%2F` (a remote's model `NAME/MODEL`)
    is one segment, where the decoded `path` would split it in two."""
    raw = scope.get("raw_path")
    if not raw:
        return str(scope["path"]).strip("/").split("/")
    return [unquote(segment) for segment in raw.decode("latin-1").strip("/").split("/")]


def parse_query(scope: Scope) -> Query:
    return parse_qs(scope.get("query_string", b"").decode("latin-1"))


def query_text(query: Query, name: str, default: str = "") -> str:
    """The first value of `name`, or `default` when the query has none."""
    values = query.get(name)
    return values[0] if values else default


def query_whole(query: Query, name: str, default: int, low: int, high: int | None, message: str) -> int:
    """The whole number `name` holds (or `default`), from `low` to `high` (None: no bound); else a 400 saying
    `message`, which names `name` as its param. Signs, spaces, decimals and non-ASCII digits ("²") are refused too."""
    text = query_text(query, name, str(default))
    if not (text.isascii() and text.isdigit()) or int(text) < low or (high is not None and int(text) > high):
        raise ApiError(400, message, param=name)
    return int(text)


async def read_limited(receive: Receive, limit: int, too_large_status: int = 413) -> bytes:
    """The body's bytes, or a refusal when they are more than `limit`, or when they are JSON with a lone UTF-16
    surrogate in a string (a 400 naming the field; every route's body is read here). ClientGone passes through:
    nobody is left to answer."""
    try:
        raw = await read_body(receive, limit)
    except BodyTooLarge:
        raise ApiError(too_large_status, f"The body is over {limit} bytes.") from None
    if may_hold_surrogate(raw):  # rare: only then is the body parsed here as well as by its route
        try:
            load_body(raw)
        except LoneSurrogate as exc:
            raise ApiError(400, str(exc), param=exc.param) from None
        except BadJson:
            pass  # not JSON: the route refuses it in its own words
    return raw


async def read_json_object(receive: Receive, limit: int = MAX_BODY, too_large_status: int = 413) -> dict[str, Any]:
    """The body as a JSON object (an empty body is `{}`), or a refusal that says what was wrong with it."""
    try:
        body = load_json(await read_limited(receive, limit, too_large_status) or b"{}")
    except ValueError:  # BadJson: not JSON, not UTF-8, or nested too deeply
        raise ApiError(400, "The body is not JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The body must be a JSON object.")
    return body
