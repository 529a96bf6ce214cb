"""The OpenAI-compatible endpoint (/v1): checks, routes by `model`, queues, measures and streams through.

Bytes from the engine are forwarded as they arrive, never re-serialized; they are only searched as far as
measurement needs (app.service.metrics.metering).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from app.bounded_json import LoneSurrogate, load_body
from app.service.engines import EngineManager
from app.service.gateway.cors import adding_cors_headers, preflight
from app.service.gateway.dialect import Dialect, send_openai_edge_error
from app.service.gateway.embeddings import shape_embeddings
from app.service.gateway.features import CHAT, adapt, drop_nulls, has_features
from app.service.gateway.gateway_routes import PROXIED_PATHS, model_list, start_failure
from app.service.gateway.model_names import ModelRename
from app.service.gateway.openai_fields import check_request, normalise
from app.service.gateway.outcome import (
    CLIENT_CLOSED,
    GatewayRequest,
    Outcome,
    StreamPlan,
    cancel_when_gone,
    read_usage,
    record_of,
    relay_chunks,
)
from app.service.gateway.prompt_count import PromptCounter
from app.service.gateway.prompt_limits import PromptLimits
from app.service.gateway.prompt_tokens import count_tokens, prompt_text
from app.service.gateway.slot_router import SlotChoice, SlotRouter, prompt_parts
from app.service.gateway.template_failure import template_failure
from app.service.gateway.templates import TemplateRenderer
from app.service.gateway.tool_calls import plan_tools, rewrite_answer, wants_tools
from app.service.gateway.tool_stream import ToolStream
from app.service.gateway.upstream import Response, UpstreamPool
from app.service.gateway.upstream_endpoint import EndpointCache, Unreachable, UpstreamError
from app.service.gateway.validation import InvalidRequest
from app.service.http.asgi import (
    DIRECT_BODY,
    LOOPBACK_HOSTS,
    BodyTooLarge,
    ClientGone,
    DirectBody,
    Receive,
    Scope,
    Send,
    header,
    host_allowed,
    key_ok,
    openai_error,
    read_body,
    send_error,
    send_json,
)
from app.service.http.routes import send_not_allowed
from app.service.launch.admission import QueueFull
from app.service.launch.route import Route
from app.service.metrics.metering import StreamMeter, ends_with_done, split_done, usage_event
from app.service.metrics.request_log import RequestLog
from app.service.metrics.request_text import PROMPT_FIELDS, RequestText
from engines.states import EngineState

_FORWARDED_RESPONSE_HEADERS = frozenset({b"content-type", b"cache-control"})


@dataclass(frozen=True)
class GatewayConfig:
    api_key: str | None  # None only on loopback, by the user's explicit choice
    allowed_hosts: frozenset[str] = LOOPBACK_HOSTS
    cors_origins: frozenset[str] = frozenset()
    max_body_bytes: int = 4 * 1024 * 1024
    start_timeout_s: float = 300.0
    log_request_text: bool = False  # the user's choice: prompts and completions in the request log
    slot_routing: bool = True  # send each conversation to the engine slot holding its prefix (gateway.slot_router)


class Gateway:
    """Raw ASGI app serving /v1. `pool` holds the keep-alive connections to the engines, opened by the server."""

    def __init__(self, manager: EngineManager, config: GatewayConfig, pool: UpstreamPool, log: RequestLog) -> None:
        self._manager = manager
        self._config = config
        self._pool = pool
        self._log = log
        self._endpoint = EndpointCache()
        self._templates = TemplateRenderer()  # its worker process starts on the first render
        self._slots = SlotRouter()
        self._limits = PromptLimits(pool, self._templates, self._endpoint, manager.context_length)
        self.prompt_counter = PromptCounter(manager, self._limits, config.start_timeout_s)  # for the dialects
        self._dialects: Sequence[Dialect] = ()

    def serve_dialects(self, dialects: Sequence[Dialect]) -> None:
        """Answer these dialects' paths too, after the same Host, CORS and key checks as OpenAI's."""
        self._dialects = dialects

    async def close(self) -> None:
        """End the chat template worker, if one was started."""
        await self._templates.close()

    def set_api_key(self, api_key: str) -> None:
        """Check requests against this key from now on: the old one stops working at once."""
        self._config = replace(self._config, api_key=api_key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        dialect = next((d for d in self._dialects if d.owns(path)), None) if self._dialects else None
        refuse = dialect.send_error if dialect is not None else send_openai_edge_error
        if not host_allowed(scope, self._config.allowed_hosts):
            await refuse(send, 403, "Host not allowed.", "permission_error")
            return
        origin = header(scope, b"origin")
        if origin is not None:
            allowed = origin.decode("latin-1") in self._config.cors_origins
            if scope["method"] == "OPTIONS":
                await preflight(send, origin if allowed else None)
                return
            if allowed:
                send = adding_cors_headers(send, [(b"access-control-allow-origin", origin), (b"vary", b"Origin")])
        if self._config.api_key is not None and not key_ok(scope, self._config.api_key):
            message = "Missing or invalid API key (Authorization: Bearer ... or x-api-key: ...)."
            await refuse(send, 401, message, "authentication_error")
            return
        await (dialect or self.openai)(scope, receive, send)

    async def openai(self, scope: Scope, receive: Receive, send: Send) -> None:
        """OpenAI's routes, for a request whose Host and key are checked: the core every dialect translates to."""
        path, method = scope["path"], scope["method"]
        if path == "/v1/models" and method in ("GET", "HEAD"):  # HEAD: the server leaves the body out
            await send_json(send, 200, model_list(self._manager))
        elif path in PROXIED_PATHS and method == "POST":
            await self._proxy(scope, receive, send)
        elif path in PROXIED_PATHS or path == "/v1/models":
            await send_not_allowed(send, method, path, ["POST"] if path in PROXIED_PATHS else ["GET", "HEAD"])
        else:
            await send_error(send, 404, f"Unknown route {path}.", "invalid_request_error", "unknown_url")

    async def _proxy(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        content_type = (header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        try:
            body = await read_body(receive, self._config.max_body_bytes)
        except ClientGone:
            return
        except BodyTooLarge:
            limit = self._config.max_body_bytes
            await send_error(send, 413, f"Request body over {limit} bytes.", "invalid_request_error")
            return
        if content_type != b"application/json":
            await send_error(send, 415, "Content-Type must be application/json.", "invalid_request_error")
            return
        try:
            payload = load_body(body)
            checked = check_request(path, payload, self._manager.context_length)
        except (ValueError, UnicodeDecodeError) as exc:
            named = exc if isinstance(exc, InvalidRequest | LoneSurrogate) else None  # a 400 naming the field
            param, message = (named.param, str(named)) if named else (None, f"Request body is not valid JSON: {exc}")
            await send_error(send, 400, message, "invalid_request_error", param=param)
            return
        # Unmeant fields out (legacy functions go with the tools); null is OpenAI's "the default", a 500 in engines
        if normalise(path, payload) | drop_nulls(path, payload):
            body = json.dumps(payload).encode()
        if checked.model not in self._manager.models:
            known = ", ".join(self._manager.models) or "none"
            await send_error(
                send, 404, f"The model `{checked.model}` does not exist. Available models: {known}.",
                "invalid_request_error", "model_not_found", "model",
            )  # fmt: skip
            return
        route = self._manager.route(checked.model)  # the one question to the manager, unless its engine must start
        changed, tools = wants_tools(payload), None
        try:  # tools first: a forced call is a `response_format`, which `adapt` says in the engine's words
            if changed:
                tools = plan_tools(route.engine_name, route.chat_template, payload)
            if has_features(path, payload):  # in the serving engine's words, or refused naming one that would serve it
                changed = adapt(route.engine_name, route.capabilities, path, payload) or changed
        except InvalidRequest as exc:
            await send_error(send, 400, str(exc), "invalid_request_error", param=exc.param)
            return
        if changed:
            body = json.dumps(payload).encode()
        outcome = Outcome()
        if self._config.log_request_text:
            outcome.text = RequestText(path, payload.get(PROMPT_FIELDS[path]), checked.stream)
        direct: DirectBody | None = scope.get("extensions", {}).get(DIRECT_BODY)
        request = GatewayRequest(path, body, payload, checked, send, direct, outcome, tools)
        started_at, started = time.time(), time.monotonic()
        # Serve in this task while one more watches for the client to go away and then cancels this one, so
        # that a queued or running request is cancelled upstream.
        handler = asyncio.current_task()
        assert handler is not None
        watcher = asyncio.create_task(cancel_when_gone(receive, handler, outcome))
        try:
            await self._serve(request, route)
        except asyncio.CancelledError:
            if not outcome.gone:
                raise  # the service is stopping
            handler.uncancel()
        finally:
            outcome.serving = False
            watcher.cancel()
        if not outcome.complete and (outcome.gone or outcome.status == 0):
            outcome.status, outcome.error = CLIENT_CLOSED, outcome.error or "client disconnected"
        self._log.add(record_of(path, checked, outcome, started_at, time.monotonic() - started), outcome.text)
        self._manager.request_finished(checked.model)

    async def _serve(self, request: GatewayRequest, route: Route) -> None:
        outcome = request.outcome
        try:
            outcome.queued_s = await route.queue.acquire()
        except QueueFull as full:
            outcome.status, outcome.error = 429, "queue full"
            message = f"Too many requests waiting for `{route.model}`; retry in {full.retry_after_s} s."
            error = json.dumps(openai_error(message, "rate_limit_error", "queue_full")).encode()
            headers = [(b"content-type", b"application/json"), (b"retry-after", str(full.retry_after_s).encode())]
            await request.send({"type": "http.response.start", "status": 429, "headers": headers})
            await request.send({"type": "http.response.body", "body": error})
            return
        acquired = time.monotonic()
        try:
            ready = route if route.url is not None else await self._ready_route(request)
            if ready is not None and request.path == "/v1/embeddings":
                ready = await self._embedding_route(request, ready)  # llama-server embeds elsewhere
            if ready is not None and not await self._within_limits(request, ready):
                ready = None
            if ready is not None:
                choice = self._choose_slot(request, ready)
                outcome.slot = choice.slot if choice is not None else None
                try:
                    if choice is not None:
                        request.body = choice.body(request.body)
                    await self._forward(request, ready)
                finally:
                    if choice is not None:
                        self._slots.finished(choice)
        finally:
            route.queue.release(acquired)

    async def _embedding_route(self, request: GatewayRequest, route: Route) -> Route | None:
        assert route.url is not None
        target = await self._manager.embedding_target(route.model, route.url)
        if target.url is None:
            request.outcome.status, request.outcome.error = 503, target.error
            await send_error(request.send, 503, target.error, "server_error", "model_unavailable")
            return None
        return replace(route, url=target.url, embedding_limit=target.limit)

    async def _within_limits(self, request: GatewayRequest, route: Route) -> bool:
        """Whether the prompt is within the limits of the engine at `route`; when not, the 400 is answered here,
        before a stream would start (app.service.gateway.prompt_limits)."""
        checked = await self._limits.check(request.path, request.body, request.payload, route)
        request.outcome.prompt_tokens, refusal = checked.prompt_tokens, checked.refusal
        if refusal is None:
            return True
        request.outcome.status, request.outcome.error = 400, str(refusal)
        await send_error(request.send, 400, str(refusal), "invalid_request_error", refusal.code, refusal.param)
        return False

    def _choose_slot(self, request: GatewayRequest, route: Route) -> SlotChoice | None:
        """The slot of the model's engine for this request, for an engine that serves several and takes `id_slot`."""
        if not self._config.slot_routing or route.slot_count < 2 or route.url is None:
            return None
        prompt = prompt_parts(request.path, request.payload)
        return None if prompt is None else self._slots.choose(route.model, route.url, route.slot_count, prompt)

    async def _ready_route(self, request: GatewayRequest) -> Route | None:
        """The model's route once its engine is ready, starting it on demand (or waiting for its restart); answers
        the client itself when that fails."""
        model = request.checked.model
        try:
            state = await asyncio.wait_for(self._manager.start(model), self._config.start_timeout_s)
        except TimeoutError:
            state = EngineState.STARTING
        route = self._manager.route(model)
        if state == EngineState.READY and route.url is not None:
            return route
        if state == EngineState.STARTING:
            message = f"The model `{model}` did not become ready within {self._config.start_timeout_s:.0f} s."
        else:
            message = start_failure(self._manager, model)
        request.outcome.status, request.outcome.error = 503, message
        await send_error(request.send, 503, message, "server_error", "model_unavailable")
        return None

    async def _forward(self, request: GatewayRequest, route: Route) -> None:
        path, payload, outcome, send = request.path, request.payload, request.outcome, request.send
        encoding = payload.pop("encoding_format", None) if path == "/v1/embeddings" else None
        if route.renamed:  # `NAME/model` here is `model` there
            payload["model"] = route.upstream_model
        if encoding is not None or route.renamed:  # engines answer floats; the gateway encodes
            request.body = json.dumps(payload).encode()
        upstream = await self._post(request, route)
        if upstream is None:
            return
        rename = ModelRename(route.upstream_model, route.model) if route.renamed else None
        tools = request.tools if upstream.status == 200 else None
        try:
            outcome.status = upstream.status
            headers = [item for item in upstream.headers if item[0] in _FORWARDED_RESPONSE_HEADERS]
            if not request.checked.stream or upstream.status != 200:
                answer = await upstream.read()
                chat_failed = upstream.status == 500 and path == CHAT
                if chat_failed and await self._template_refused(request, route):
                    outcome.complete = True
                    return
                if path == "/v1/embeddings" and upstream.status == 200:
                    pool = not route.capabilities.embeddings_pooled
                    answer = shape_embeddings(answer, pool, encoding == "base64")
                if rename is not None:
                    answer = rename.whole(answer)
                if tools is not None:
                    answer = rewrite_answer(tools, answer)
                read_usage(answer, outcome)
                if outcome.text is not None:
                    outcome.text.answer.append(answer)
                await send({"type": "http.response.start", "status": upstream.status, "headers": headers})
                outcome.complete = True
                await send({"type": "http.response.body", "body": answer})
                return
            # A remote may not honour include_usage either: add it when its stream ends without one.
            add_usage = request.checked.include_usage and (
                not route.capabilities.stream_usage or route.remote is not None
            )
            rewrite = ToolStream(tools, rename) if tools is not None else rename
            await self._stream(request, route, upstream, StreamPlan(headers, add_usage, rewrite))
        except UpstreamError as exc:
            message = f"The engine stopped answering: {exc}."
            outcome.status, outcome.error = 502, message
            if outcome.meter is None:
                await send_error(send, 502, message, "server_error", "engine_unavailable")
            else:  # the stream is open: end it with an error event a client can read
                event = b"data: " + json.dumps(openai_error(message, "server_error", "engine_failed")).encode()
                await send({"type": "http.response.body", "body": event + b"\n\ndata: [DONE]\n\n"})
        finally:
            upstream.release(answered=outcome.complete)

    async def _template_refused(self, request: GatewayRequest, route: Route) -> bool:
        """After an engine's 500 or empty stream to a chat request: when the model's chat template is what failed,
        answer what it refused instead of the engine's bare error (True)."""
        if route.chat_template is None:
            return False
        failure = await template_failure(self._templates, route.chat_template, request.payload["messages"])
        if failure is None:
            return False  # the template renders: the engine failed for another reason, passed on as it is
        request.outcome.status, request.outcome.error = failure.status, failure.problem
        await send_error(request.send, failure.status, failure.message, failure.kind, "chat_template_error")
        return True

    async def _post(self, request: GatewayRequest, route: Route) -> Response | None:
        """Send the request; None when it could not be sent, the client then answered."""
        outcome = request.outcome
        try:
            return await self._pool.post(self._endpoint(route, request.path), request.body)
        except Unreachable as exc:
            # An engine that died a moment ago may still be reported ready: wait for its restart, as a request
            # that came a little later would have done.
            if not await self._manager.engine_refused(route.model):
                error: UpstreamError = exc
            else:
                restarted = await self._ready_route(request)
                if restarted is None:
                    return None
                try:
                    return await self._pool.post(self._endpoint(restarted, request.path), request.body)
                except UpstreamError as again:
                    error = again
        except UpstreamError as exc:
            error = exc
        if route.remote is not None:
            outcome.status, outcome.error = 502, f"The remote `{route.remote}` at {route.url} did not answer: {error}."
        else:
            outcome.status, outcome.error = 502, f"The engine stopped answering: {error}."
        await send_error(request.send, 502, outcome.error, "server_error", "engine_unavailable")
        return None

    async def _stream(self, request: GatewayRequest, route: Route, upstream: Response, plan: StreamPlan) -> None:
        """Pass the engine's events on as they arrive, measuring them on the way. With a server that can write
        to the client directly, they are passed on in the engine connection's callback (`_relay`), and this
        loop only sees the end of the stream, its errors, and a last event that needs a usage event added.
        Events whose model is renamed always come through this loop."""
        outcome, send, direct, rename = request.outcome, request.send, request.direct, plan.rename
        started = time.monotonic()
        # The status waits for the first event: llama-cpp-python says 200 before it renders the chat template,
        # and ends the stream empty when that fails.
        if not await upstream.has_body():
            await self._ended_empty(request, route)
            return
        await send({"type": "http.response.start", "status": 200, "headers": plan.headers})
        meter = outcome.meter = StreamMeter(started, request.path, self._log.stream_counter(request.checked.model))
        keep = outcome.text.answer.append if outcome.text is not None else None
        if direct is not None and rename is None:
            upstream.divert(relay_chunks(direct, meter, keep, outcome, plan.add_usage))
            direct.watch_pressure(upstream.pause, upstream.resume)
        read, feed = upstream.read_chunk, meter.feed
        while chunk := await read():
            feed(chunk)  # the engine's events: what it generated, before tool calls are rewritten
            if rename is not None:
                chunk = rename.feed(chunk) + (rename.flush() if upstream.complete else b"")
            finished = ends_with_done(chunk)
            if plan.add_usage and finished and meter.usage is None:
                chunk = await self._with_usage(request, route, chunk)
            if keep is not None:
                keep(chunk)
            # A client may leave as soon as it has read [DONE], before the engine closes the stream.
            outcome.complete = outcome.complete or finished
            if upstream.complete:  # the engine's last bytes: end the answer in the same write
                outcome.complete = True
                await send({"type": "http.response.body", "body": chunk})
                return
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        rest = rename.flush() if rename is not None else b""
        outcome.complete = True
        await send({"type": "http.response.body", "body": rest})

    async def _ended_empty(self, request: GatewayRequest, route: Route) -> None:
        """Answer a stream that the engine ended before its first event with an error status: what the chat template
        refused when that is what failed, as for an answer that is not streamed."""
        outcome = request.outcome
        if request.path != CHAT or not await self._template_refused(request, route):
            message = "The engine ended the stream without sending anything."
            if not route.external:
                message += f" Its log may say why (GET /api/models/{route.model}/logs)."
            outcome.status, outcome.error = 502, message
            await send_error(request.send, 502, message, "server_error", "engine_failed")
        outcome.complete = True

    async def _with_usage(self, request: GatewayRequest, route: Route, chunk: bytes) -> bytes:
        """`chunk`, which ends in [DONE], with the usage event OpenAI sends before it, for engines that leave
        it out: completion tokens counted from the stream, prompt tokens counted by the engine's tokenizer."""
        meter, outcome = request.outcome.meter, request.outcome
        assert meter is not None
        before, done = split_done(chunk)
        count_path = route.capabilities.tokenize_count_path
        if outcome.prompt_tokens is None and count_path is not None:  # not counted already, by its limits' check
            text = await prompt_text(request.path, request.payload, route.chat_template, self._templates)
            if text is not None:
                outcome.prompt_tokens = await count_tokens(self._pool, self._endpoint(route, count_path), text)
        return before + usage_event(meter.first_event, outcome.prompt_tokens, meter.completion_tokens) + done
