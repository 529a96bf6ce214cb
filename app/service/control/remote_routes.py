"""Control API for remote endpoints: GET /api/remotes, POST /api/remotes {"name", "url", "api_key"},
DELETE /api/remotes/NAME. Keys are taken, stored and used, never answered back."""

from __future__ import annotations

from app.bounded_json import load_json
from app.service.http.api import MAX_BODY, ApiError, read_limited
from app.service.http.asgi import Receive, Send, send_error, send_json
from app.service.http.routes import RoutePattern
from app.service.remotes import RemoteError, RemoteRegistry, RemoteUnavailable


class RemoteRoutes:
    routes: tuple[RoutePattern, ...] = (
        ("GET", "/api/remotes"),
        ("POST", "/api/remotes"),
        ("DELETE", "/api/remotes/{}"),
    )

    def __init__(self, registry: RemoteRegistry) -> None:
        self._registry = registry

    async def handle(self, method: str, parts: list[str], receive: Receive, send: Send) -> bool:
        """Answer the request if it is one of ours; False to let the caller route it."""
        match method, parts:
            case "GET", ["api", "remotes"]:
                await send_json(send, 200, self._registry.describe())
            case "POST", ["api", "remotes"]:
                await self._add(receive, send)
            case "DELETE", ["api", "remotes", name]:
                if self._registry.remove(name):
                    await send_json(send, 200, {"removed": name})
                else:
                    await send_error(
                        send, 404, f"No remote named {name!r}.", "invalid_request_error", "remote_not_found"
                    )
            case _:
                return False
        return True

    async def _add(self, receive: Receive, send: Send) -> None:
        expected = 'Expected a JSON object {"name", "url", "api_key"}.'
        try:
            body = load_json(await read_limited(receive, MAX_BODY))
        except ApiError as exc:
            if exc.status != 413:
                raise  # a lone surrogate in a field: the 400 names it
            raise ApiError(400, expected) from None
        except ValueError:  # not JSON (UnicodeDecodeError is a ValueError)
            raise ApiError(400, expected) from None
        if not isinstance(body, dict) or set(body) - {"name", "url", "api_key"}:
            await send_error(send, 400, "Expected a JSON object with `name`, `url` and optionally `api_key`.",
                             "invalid_request_error")  # fmt: skip
            return
        key = body.get("api_key")
        if key is not None and (not isinstance(key, str) or not key.strip()):
            await send_error(
                send, 400, "`api_key` must be a non-empty string.", "invalid_request_error", param="api_key"
            )
            return
        try:
            remote = await self._registry.add(body.get("name", ""), body.get("url", ""), key)
        except RemoteUnavailable as exc:
            await send_error(send, 502, str(exc), "server_error", "remote_unavailable")
            return
        except RemoteError as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", "invalid_remote")
            return
        described = next(r for r in self._registry.describe() if r["name"] == remote.name)
        await send_json(send, 201, described)
