"""Control-API routes for the user's settings, the endpoint's API key and the Hugging Face token.

GET/PUT /api/settings, POST /api/key/regenerate, PUT/DELETE /api/hf-token. Settings that shape the listeners
apply when the service next starts, and the answers say which ones wait for that. Secrets go to the keyring (or
the key's user-only file) on a thread; they are never logged, and the Hugging Face token is never sent back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.hub.token import TokenStoreError, clear_token, read_token, save_token
from app.keys import ApiKey, KeyNotReplaceable, replace_api_key
from app.paths import AppPaths
from app.service.http.api import ApiError, read_json_object
from app.service.http.asgi import Receive, Send, send_json
from app.service.http.lan import is_unspecified, lan_addresses, local_addresses
from app.service.http.routes import RoutePattern
from app.settings import (
    RESTART_FIELDS,
    Settings,
    SettingsError,
    is_loopback_address,
    load_settings,
    save_settings,
    with_models_dir,
)

CONFIRM_FIELD = "confirm_lan_exposure"
LAN_WARNING = (
    "Anyone on your network who has the API key can use your models and your machine's memory and power. "
    "Share the key only with people you trust, and regenerate it if it leaks. The control API stays on this "
    "machine."
)


@dataclass(frozen=True)
class RunningValues:
    """What the running service listens with, to compare against the saved settings."""

    gateway_port: int
    control_port: int
    requested_control_port: int
    bind_address: str
    cors_origins: tuple[str, ...]
    idle_ttl_s: float | None
    models_dir: str


class SettingsRoutes:
    """Answers /api/settings, /api/key/regenerate and /api/hf-token; `handle` returns False for other routes.

    `current_key` is the key the endpoint checks (None: started with --no-api-key); `on_key_replaced` makes the
    gateway and the control API use a new one at once."""

    routes: tuple[RoutePattern, ...] = (
        ("GET", "/api/settings"), ("PUT", "/api/settings"), ("POST", "/api/key/regenerate"), ("PUT", "/api/hf-token"),
        ("DELETE", "/api/hf-token"),
    )  # fmt: skip

    def __init__(
        self,
        paths: AppPaths,
        running: RunningValues,
        current_key: ApiKey | None,
        on_key_replaced: Callable[[ApiKey], dict[str, Any]],
        load_problem: str | None = None,
    ) -> None:
        self._paths = paths
        self._running = running
        self._key = current_key
        self._on_key_replaced = on_key_replaced
        self._load_problem = load_problem
        self._lock = asyncio.Lock()  # one read-modify-write of the settings file at a time

    async def handle(self, method: str, parts: list[str], receive: Receive, send: Send) -> bool:
        """Answer the request if it is one of ours; a refusal is raised as ApiError, for the control API to send."""
        match method, parts:
            case "GET", ["api", "settings"]:
                await send_json(send, 200, await self._describe(await asyncio.to_thread(self._load)))
            case "PUT", ["api", "settings"]:
                await send_json(send, 200, await self._update(await read_json_object(receive)))
            case "POST", ["api", "key", "regenerate"]:
                await send_json(send, 200, await self._regenerate())
            case "PUT", ["api", "hf-token"]:
                await send_json(send, 200, await self._save_token(await read_json_object(receive)))
            case "DELETE", ["api", "hf-token"]:
                removed = await asyncio.to_thread(_clear_token)
                await send_json(send, 200, {"set": False, "removed": removed})
            case _:
                return False
        return True

    def _load(self) -> Settings:
        loaded = load_settings(self._paths)
        if loaded.problem:  # the file went bad while the service ran: it is set aside now, say so
            self._load_problem = loaded.problem
        return loaded.settings

    def lan_info(self) -> dict[str, Any]:
        return {"addresses": lan_addresses(), "warning": LAN_WARNING, "port": self._running.gateway_port}

    async def _describe(self, settings: Settings) -> dict[str, Any]:
        token = await asyncio.to_thread(read_token)
        running = self._running
        return {
            "settings": settings.to_dict(),
            "running": {
                "gateway_port": running.gateway_port, "control_port": running.control_port,
                "bind_address": running.bind_address, "cors_origins": list(running.cors_origins),
                "idle_ttl_s": running.idle_ttl_s, "models_dir": running.models_dir,
            },
            "restart_required": self._restart_required(settings),
            "problem": self._load_problem,
            "api_key": {"present": self._key is not None, "source": self._key.source if self._key else "none"},
            "hf_token": {"set": token.value is not None, "source": token.source, "note": token.note},
            "lan": await asyncio.to_thread(self.lan_info),
        }  # fmt: skip

    def _restart_required(self, settings: Settings) -> list[str]:
        running = self._running
        now = {
            "gateway_port": running.gateway_port, "control_port": running.requested_control_port,
            "bind_address": running.bind_address, "cors_origins": running.cors_origins,
            "idle_ttl_s": running.idle_ttl_s, "models_dir": running.models_dir,
        }  # fmt: skip
        saved = {name: getattr(settings, name) for name in RESTART_FIELDS}
        saved["models_dir"] = str(with_models_dir(self._paths, settings).models_dir)
        return sorted(name for name in RESTART_FIELDS if saved[name] != now[name])

    async def _update(self, body: dict[str, Any]) -> dict[str, Any]:
        confirmed = body.pop(CONFIRM_FIELD, False) is True
        async with self._lock:
            current = await asyncio.to_thread(self._load)
            try:
                updated = current.updated(body)
            except SettingsError as exc:
                raise ApiError(400, f"{exc}.", "invalid_setting", exc.field) from None
            if updated.control_port and updated.control_port == updated.gateway_port:
                raise ApiError(400, "control_port must differ from gateway_port.", "invalid_setting", "control_port")
            if updated.bind_address != current.bind_address:
                await self._check_bind(updated.bind_address, confirmed)
            await asyncio.to_thread(save_settings, self._paths, updated)
        answer = await self._describe(updated)
        answer["changed"] = sorted(name for name in body if getattr(current, name) != getattr(updated, name))
        return answer

    async def _check_bind(self, address: str, confirmed: bool) -> None:
        """LAN exposure is a deliberate act: this machine's address, an API key, and an explicit confirmation."""
        if is_loopback_address(address):
            return
        if not is_unspecified(address) and address not in await asyncio.to_thread(local_addresses):
            known = ", ".join(await asyncio.to_thread(lan_addresses)) or "none but loopback"
            raise ApiError(400, f"bind_address: {address} is not an address of this machine (its addresses: {known}).",
                           "invalid_setting", "bind_address")  # fmt: skip
        lan = await asyncio.to_thread(self.lan_info)
        if self._key is None:
            raise ApiError(
                409, "The endpoint runs without an API key (--no-api-key), so it cannot be exposed on the network: "
                "anyone there could use it. Restart the service with a key first.",
                "api_key_required", "bind_address", lan=lan,
            )  # fmt: skip
        if not confirmed:
            raise ApiError(
                409, f"Exposing the endpoint on {address} needs a confirmation ({CONFIRM_FIELD}: true). {LAN_WARNING}",
                "confirmation_required", "bind_address", lan=lan,
            )  # fmt: skip

    async def _regenerate(self) -> dict[str, Any]:
        if self._key is None:
            raise ApiError(409, "The endpoint runs without an API key (--no-api-key): there is none to replace.",
                           "api_key_required")  # fmt: skip
        current = self._key
        try:
            fresh = await asyncio.to_thread(replace_api_key, self._paths, current)
        except KeyNotReplaceable as exc:
            raise ApiError(409, f"Cannot replace the API key: {exc}.", "key_not_replaceable") from None
        self._key = fresh
        return self._on_key_replaced(fresh)

    async def _save_token(self, body: dict[str, Any]) -> dict[str, Any]:
        token = body.get("token")
        if not isinstance(token, str) or not token.strip():
            raise ApiError(400, 'Send {"token": "hf_..."}.', "invalid_request_error", "token")
        try:
            await asyncio.to_thread(save_token, token)
        except TokenStoreError as exc:
            raise ApiError(409, f"Could not save the token: {exc}.", "token_not_saved") from None
        return {"set": True, "source": "keyring"}


def _clear_token() -> bool:
    try:
        return clear_token()
    except TokenStoreError as exc:
        raise ApiError(409, f"{exc}.", "token_not_removed") from None
