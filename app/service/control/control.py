"""The control API (/api): loopback only, bearer token from a user-only file. Used by the GUI and the CLI."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from app import __version__
from app.api_types import AboutRecord, EngineInstallation
from app.planner.plans import NoVariants
from app.planner.recommend import USES
from app.service.control.advisor import Advisor
from app.service.control.bench_routes import BenchRoutes
from app.service.control.child_job_routes import job_routes
from app.service.control.engine_routes import EngineRoutes
from app.service.control.hub_routes import HubRoutes
from app.service.control.model_settings_routes import ModelSettingsRoutes
from app.service.control.quality_routes import QualityRoutes
from app.service.control.remote_routes import RemoteRoutes
from app.service.control.settings_routes import SettingsRoutes
from app.service.engines import EngineManager, PlanConflict, UnknownModel
from app.service.events import EventBus
from app.service.http.api import (
    MAX_SMALL_BODY,
    ApiError,
    Query,
    parse_query,
    path_segments,
    query_text,
    query_whole,
    read_limited,
    send_api_error,
)
from app.service.http.asgi import (
    LOOPBACK_HOSTS,
    ClientGone,
    Message,
    Receive,
    Scope,
    Send,
    bearer_ok,
    host_allowed,
    send_bytes,
    send_error,
    send_json,
    wait_disconnect,
)
from app.service.http.routes import RoutePattern, RouteTable, head_only, send_not_allowed
from app.service.launch.overrides import BadOverrides, PlanOverrides
from app.service.metrics.metrics_pipeline import DEFAULT_MAX_POINTS, MetricsPipeline
from app.service.metrics.request_log import RequestLog
from app.version import provenance
from engines.gguf import GGUFError

log = logging.getLogger("modeldeck.control")

SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
KEEPALIVE_S = 15.0
MAX_USERS = 4096
# The routes `_route` answers itself; each route module lists its own (`routes`), next to its handler.
ROUTES: tuple[RoutePattern, ...] = (
    ("GET", "/api/health"), ("GET", "/api/about"), ("GET", "/api/models"), ("GET", "/api/endpoint"),
    ("GET", "/api/models/{}/logs"), ("POST", "/api/models/{}/start"), ("POST", "/api/models/{}/stop"),
    ("GET", "/api/hardware"), ("GET", "/api/recommend"), ("GET", "/api/metrics"), ("GET", "/api/series"),
    ("GET", "/api/requests"), ("GET", "/metrics"), ("GET", "/api/events"), ("POST", "/api/shutdown"),
)  # fmt: skip


def api_routes() -> tuple[RoutePattern, ...]:
    """Every route the control API of a service started by `serve` answers (with all its parts), as method and
    path pattern: for clients and tests that walk the API, such as the fuzz test, so that a new route is in it."""
    parts = (HubRoutes, RemoteRoutes, SettingsRoutes, ModelSettingsRoutes, EngineRoutes)
    return (*ROUTES, *(route for part in parts for route in part.routes), *job_routes("bench"), *job_routes("quality"))


class _Routed(Protocol):
    @property
    def routes(self) -> tuple[RoutePattern, ...]: ...


@dataclass(frozen=True)
class EndpointInfo:
    """What a client needs to use the OpenAI endpoint, as the GUI shows it."""

    url: str
    api_key: str | None  # None: the endpoint was started without a key (loopback only)
    key_source: str
    key_note: str
    tls: dict[str, str | bool] | None = None  # TlsIdentity.describe(): the certificate clients must trust; None: HTTP


class ControlApi:
    """Raw ASGI app serving /api."""

    def __init__(
        self,
        manager: EngineManager,
        bus: EventBus,
        token: str,
        endpoint: EndpointInfo,
        request_shutdown: Callable[[], None],
        request_log: RequestLog,
        advisor: Advisor,
        hub: HubRoutes | None = None,
        metrics: MetricsPipeline | None = None,
        remotes: RemoteRoutes | None = None,
        settings: SettingsRoutes | None = None,
        bench: BenchRoutes | None = None,
        model_settings: ModelSettingsRoutes | None = None,
        quality: QualityRoutes | None = None,
        engine_builds: EngineRoutes | None = None,
    ) -> None:
        self._manager = manager
        self._model_settings = model_settings
        self._remotes = remotes
        self._settings = settings
        self._bench = bench
        self._quality = quality
        self._engines = engine_builds
        self._hub = hub
        self._metrics = metrics
        self._advisor = advisor
        self._bus = bus
        self._token = token
        self._endpoint = endpoint
        self._request_shutdown = request_shutdown
        self._request_log = request_log
        self._background: set[asyncio.Task[Any]] = set()
        parts: tuple[_Routed | None, ...] = (hub, remotes, settings, bench, model_settings, quality, engine_builds)
        # Every route answered, as method and path: the gate before routing, so that a wrong method on a known
        # path is a 405 that says which it takes.
        routes = [*ROUTES, *(route for part in parts if part is not None for route in part.routes)]
        unlisted = sorted(set(routes) - set(api_routes()))
        if unlisted:  # clients and the fuzz test walk api_routes(): a part left out of it would go unfuzzed
            raise RuntimeError(f"routes missing from api_routes(): {unlisted}")
        self._routes = RouteTable(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not host_allowed(scope, LOOPBACK_HOSTS):
            await send_error(send, 403, "Host not allowed.", "permission_error")
            return
        if not bearer_ok(scope, self._token):
            await send_error(send, 401, "Missing or invalid control token.", "authentication_error")
            return
        method, parts = scope["method"], path_segments(scope)
        allowed = self._routes.allowed(parts)
        if method not in allowed:
            if allowed:
                await send_not_allowed(send, method, "/" + "/".join(parts), allowed)
            else:
                await send_error(send, 404, f"Unknown route {method} /{'/'.join(parts)}.", "invalid_request_error")
            return
        answer = _Answer(head_only(send) if method == "HEAD" else send)
        if method == "HEAD":  # as GET, without the body (RFC 9110, 9.3.2)
            method = "GET"
        try:
            await self._route(method, parts, parse_query(scope), receive, answer)
        except UnknownModel as exc:
            await send_error(answer, 404, f"Unknown model {exc.args[0]!r}.", "invalid_request_error", "model_not_found")
        except ApiError as exc:
            await send_api_error(answer, exc)
        except ClientGone:
            pass  # nobody is left to answer
        except Exception:
            if answer.started:
                raise  # the server ends the connection: the client must not take a half answer as whole
            log.exception("the control API failed on %s %s", method, "/" + "/".join(parts))
            await send_error(answer, 500, "Internal error; the service's log says what failed.", "server_error")

    async def _route(self, method: str, parts: list[str], query: Query, receive: Receive, send: Send) -> None:
        match method, parts:
            case "GET", ["api", "health"]:
                lifecycle = self._manager.lifecycle
                budget = {"bytes": lifecycle.max_loaded_bytes, "source": lifecycle.max_loaded_source}
                await send_json(send, 200, {"status": "ok", "version": __version__, "memory_budget": budget})
            case "GET", ["api", "about"]:
                await send_json(send, 200, await self._about())
            case "GET", ["api", "models"]:
                await send_json(send, 200, [self._manager.describe(m) for m in self._manager.models])
            case "GET", ["api", "endpoint"]:
                await send_json(send, 200, self._endpoint.__dict__)
            case "GET", ["api", "models", model_id, "logs"]:
                tail = query_whole(query, "tail", 200, 0, None, "`tail` must be a whole number.")
                await send_json(send, 200, {"lines": self._manager.logs(model_id, tail)})
            case "POST", ["api", "models", model_id, "start"]:
                await self._start(model_id, wait="wait" in query, receive=receive, send=send)
            case "GET", ["api", "hardware"]:
                await send_json(send, 200, (await self._advisor.hardware()).to_dict())
            case "GET", ["api", "recommend"]:
                await self._recommend(query, send)
            case "POST", ["api", "models", model_id, "stop"]:
                await self._manager.stop(model_id)
                await send_json(send, 200, self._manager.describe(model_id))
            case "GET", ["api", "metrics"]:
                window = query_whole(query, "window", 60, 1, None, "`window` must be a whole number of seconds.")
                aggregates = self._request_log.aggregates(float(window))
                await send_json(send, 200, {"window_s": window, "models": aggregates,
                                            "queues": self._manager.queue_depths()})  # fmt: skip
            case "GET", ["api", "series"]:
                await self._series(query, send)
            case "GET", ["api", "requests"]:
                limit = query_whole(query, "limit", 100, 0, None, "`limit` must be a whole number.")
                await send_json(send, 200, self._request_log.recent(limit))
            case "GET", ["metrics"]:
                text = self._request_log.prometheus(self._manager.queue_depths()).encode()
                await send_bytes(send, 200, text, [(b"content-type", b"text/plain; version=0.0.4")])
            case "GET", ["api", "events"]:
                stream = asyncio.create_task(self._stream_events(send))
                gone = asyncio.create_task(wait_disconnect(receive))
                await asyncio.wait({stream, gone}, return_when=asyncio.FIRST_COMPLETED)
                for task in (stream, gone):
                    task.cancel()
            case "POST", ["api", "shutdown"]:
                await send_json(send, 202, {"status": "shutting down"})
                self._request_shutdown()
            case _ if self._hub is not None and await self._hub.handle(method, parts, query, receive, send):
                pass
            case _ if self._remotes is not None and await self._remotes.handle(method, parts, receive, send):
                pass
            case _ if self._settings is not None and await self._settings.handle(method, parts, receive, send):
                pass
            case _ if self._bench is not None and await self._bench.handle(method, parts, query, receive, send):
                pass
            case _ if self._model_settings is not None and await self._model_settings.handle(method, parts, receive,
                                                                                               send):  # fmt: skip
                pass
            case _ if self._quality is not None and await self._quality.handle(method, parts, query, receive, send):
                pass
            case _ if self._engines is not None and await self._engines.handle(method, parts, query, receive, send):
                pass
            case _:
                await send_error(send, 404, f"Unknown route {method} /{'/'.join(parts)}.", "invalid_request_error")

    async def _about(self) -> AboutRecord:
        """The service's version, the commit it was built from, and each engine's installation."""
        found = provenance()
        engines: dict[str, EngineInstallation] = {
            name: {"installed": i.installed, "version": i.version, "detail": i.detail}
            for name, i in (await self._advisor.engines()).items()
        }
        return {"version": found.version, "commit": found.commit, "source": found.source, "engines": engines}

    def set_endpoint(self, endpoint: EndpointInfo) -> None:
        """What /api/endpoint answers from now on (a new API key)."""
        self._endpoint = endpoint

    async def _start(self, model_id: str, wait: bool, receive: Receive, send: Send) -> None:
        self._manager.describe(model_id)  # raises UnknownModel before anything starts
        try:
            overrides = PlanOverrides.from_json(await read_limited(receive, MAX_SMALL_BODY))
            await self._manager.check_start(model_id, overrides)
        except BadOverrides as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", param=exc.param)
            return
        except PlanConflict as exc:
            await send_error(send, 409, str(exc), "invalid_request_error", "plan_conflict")
            return
        if wait:
            await self._manager.start(model_id, overrides)
            await send_json(send, 200, self._manager.describe(model_id))
            return
        task = asyncio.create_task(self._manager.start(model_id, overrides))
        self._background.add(task)
        task.add_done_callback(self._on_start_done)
        await send_json(send, 202, self._manager.describe(model_id))

    def _on_start_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Nobody awaits a start answered with 202; a start racing another one's parameters ends here.
            log.error("start failed: %s", task.exception())

    async def _recommend(self, query: Query, send: Send) -> None:
        model_id, use = query_text(query, "model"), query_text(query, "use", "chat")
        if not model_id:
            await send_error(send, 400, "`model` is required.", "invalid_request_error", param="model")
            return
        spec = self._manager.models.get(model_id)
        if spec is None:
            raise UnknownModel(model_id)
        if use not in USES:
            message = f"`use` must be one of {', '.join(USES)}; got {use!r}."
            await send_error(send, 400, message, "invalid_request_error", param="use")
            return
        users = None
        if query_text(query, "users"):  # none, or empty: the planner's default
            users = query_whole(
                query, "users", 1, 1, MAX_USERS, f"`users` must be a whole number from 1 to {MAX_USERS}."
            )
        try:
            result = await self._advisor.recommend(spec, use, users)
        except NoVariants as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", "model_not_plannable")
            return
        except GGUFError as exc:
            await send_error(send, 422, str(exc), "invalid_request_error", "model_unreadable")
            return
        await send_json(send, 200, result.to_dict())

    async def _series(self, query: Query, send: Send) -> None:
        """Time series over `window` seconds (1 s points up to an hour, minute averages beyond), at most
        `max_points` points each; `names` (comma-separated) and `model` narrow the answer."""
        if self._metrics is None:
            await send_error(send, 404, "This service runs without a metrics pipeline.", "invalid_request_error")
            return
        window = query_whole(
            query, "window", 600, 1, 7 * 24 * 3600, "`window` must be a whole number of seconds up to a week."
        )
        max_points = query_whole(query, "max_points", DEFAULT_MAX_POINTS, 1, 100_000,
                                 "`max_points` must be a whole number from 1 to 100000.")  # fmt: skip
        names_text = ",".join(query.get("names", []))
        names = {name for name in names_text.split(",") if name} or None
        model = query.get("model", [None])[0]
        await send_json(send, 200, self._metrics.query(float(window), names, model, max_points))

    async def _stream_events(self, send: Send) -> None:
        """Server-sent events: a snapshot of every model first, then engine and log events as they happen."""
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        async with self._bus.subscribe() as queue:
            snapshot = {
                "type": "snapshot",
                "models": [self._manager.describe(m) for m in self._manager.models],
            }
            await send({"type": "http.response.body", "body": _sse(snapshot), "more_body": True})
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), KEEPALIVE_S)
                    body = _sse(event)
                except TimeoutError:
                    body = b": keep-alive\n\n"
                await send({"type": "http.response.body", "body": body, "more_body": True})


class _Answer:
    """`send`, noting whether the answer has begun: a failure before that is answered with a JSON 500, rather than
    the server's bare-text one."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        self.started = self.started or message["type"] == "http.response.start"
        await self._send(message)


def _sse(event: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(event, default=str).encode() + b"\n\n"
