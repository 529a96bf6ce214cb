"""Ollama's REST API (/api/* on the endpoint's listener) as a dialect over the gateway's OpenAI core, so that
Ollama's clients and the integrations written for it work against ModelDeck.

Chat, generate and embeddings are translated into the core's requests (app.service.dialects.ollama_request) and
their answers back (ollama_stream); the model listings come from the engine manager (ollama_models). Every error is
Ollama's `{"error": "<sentence>"}` with the HTTP status kept. Model management (pull, push, create, copy, delete) is
ModelDeck's own, in its window and the `modeldeck` command, and is refused here saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from app.bounded_json import load_body
from app.service.dialects.inner import AsgiApp, call_core, error_message
from app.service.dialects.ollama_models import HeaderCache, listed_name, ps, show, tags, version
from app.service.dialects.ollama_options import BadRequest, KeepAlive, keep_alive
from app.service.dialects.ollama_request import (
    CoreRequest,
    chat_request,
    embed_inputs,
    generate_request,
    model_name,
)
from app.service.dialects.ollama_stream import Clock, OllamaAnswer, relay, send_whole
from app.service.engines import EngineManager
from app.service.http.asgi import BodyTooLarge, ClientGone, Receive, Scope, Send, header, read_body, send_bytes
from engines.states import EngineState

_START_WAIT_S = 300.0  # as the core waits for a model's engine to start (GatewayConfig.start_timeout_s)
_GETS = frozenset({"/api/version", "/api/tags", "/api/ps"})
_POSTS = frozenset({"/api/show", "/api/chat", "/api/generate", "/api/embed", "/api/embeddings"})
_MANAGEMENT = frozenset({"/api/pull", "/api/push", "/api/create", "/api/copy", "/api/delete"})


class OllamaDialect:
    """Serves Ollama's API for requests whose Host and key the gateway has checked."""

    def __init__(self, core: AsgiApp, manager: EngineManager, max_body_bytes: int) -> None:
        self._core = core
        self._manager = manager
        self._max_body_bytes = max_body_bytes
        self._headers = HeaderCache()

    def owns(self, path: str) -> bool:
        return path == "/" or path == "/api" or path.startswith("/api/")

    async def send_error(self, send: Send, status: int, message: str, kind: str) -> None:
        await send_whole(send, status, {"error": message})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        clock = Clock()
        try:
            await self._route(scope, receive, send, clock)
        except BadRequest as exc:
            await send_whole(send, exc.status, {"error": str(exc)})
        except ClientGone:
            pass  # nobody is left to answer

    async def _route(self, scope: Scope, receive: Receive, send: Send, clock: Clock) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/" and method in ("GET", "HEAD"):  # Ollama's clients probe the root
            await send_bytes(send, 200, b"Ollama is running", [(b"content-type", b"text/plain; charset=utf-8")])
        elif path in _GETS and method in ("GET", "HEAD"):
            await send_whole(send, 200, await self._listing(path))
        elif path in _POSTS and method == "POST":
            await self._serve(path, scope, receive, send, clock)
        elif path.startswith("/api/blobs/") or path in _MANAGEMENT:
            message = (f"{path} is not served: ModelDeck keeps its own models; add them in the ModelDeck window or "
                       "with `modeldeck pull` and `modeldeck import`.")  # fmt: skip
            await send_whole(send, 501, {"error": message})
        elif path in _GETS or path in _POSTS or path == "/":
            allowed = "POST" if path in _POSTS else "GET"
            await send_whole(send, 405, {"error": f"{method} is not allowed on {path}; use {allowed}."})
        else:
            await send_whole(send, 404, {"error": f"Unknown route {path}."})

    async def _listing(self, path: str) -> dict[str, Any]:
        if path == "/api/tags":
            return await tags(self._manager, self._headers)
        if path == "/api/ps":
            return await ps(self._manager, self._headers)
        return version()

    async def _body(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        """The JSON object of the request, whatever its Content-Type (Ollama's own examples send curl's form type),
        except from a web page: a browser sends JSON only after a CORS preflight, which only the listed origins pass,
        while a form's POST needs none, and on a keyless listener nothing else would keep a page out."""
        content_type = (header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        if header(scope, b"origin") is not None and content_type != b"application/json":
            raise BadRequest("Content-Type must be application/json.", 415)
        try:
            raw = await read_body(receive, self._max_body_bytes)
        except BodyTooLarge:
            raise BadRequest(f"Request body over {self._max_body_bytes} bytes.", 413) from None
        try:
            body = load_body(raw)
        except ValueError as exc:  # BadJson, LoneSurrogate, UnicodeDecodeError
            raise BadRequest(f"Request body is not valid JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object.")
        return body

    def _known(self, model: str) -> str:
        """`model` as the service names it; a 404 naming the models it serves when it is none of them."""
        if model in self._manager.models:
            return model
        served = ", ".join(listed_name(known) for known in self._manager.models) or "none"
        raise BadRequest(f'model "{model}" not found: ModelDeck serves {served}.', 404)

    async def _serve(self, path: str, scope: Scope, receive: Receive, send: Send, clock: Clock) -> None:
        body = await self._body(scope, receive)
        if path == "/api/show":
            await send_whole(send, 200, await show(self._manager, self._headers, self._known(model_name(body))))
        elif path in ("/api/embed", "/api/embeddings"):
            await self._embed(body, path == "/api/embeddings", scope, receive, send, clock)
        else:
            model = self._known(model_name(body))
            context = self._manager.context_length(model)
            chat = path == "/api/chat"
            request = chat_request(body, context) if chat else generate_request(body, context)
            await self._generate(request, chat, scope, receive, send, clock)

    async def _load(self, model: str, clock: Clock) -> None:
        """Start the model's engine when it is not ready, measuring how long that took (Ollama's
        load_duration). A failed model is left to the core, which tries its start once more and explains a failure as
        it would to an OpenAI client; trying here too would double a slow failure."""
        if self._manager.state(model) not in (EngineState.READY, EngineState.FAILED):
            started = time.perf_counter_ns()
            with contextlib.suppress(TimeoutError):  # the core waits as long again, then says it did not start
                await asyncio.wait_for(self._manager.start(model), _START_WAIT_S)
            clock.load_ns = time.perf_counter_ns() - started

    async def _generate(self, request: CoreRequest, chat: bool, scope: Scope, receive: Receive, send: Send,
                        clock: Clock) -> None:  # fmt: skip
        model = request.model
        await self._load(model, clock)
        if request.load_only:
            unload = request.keep_alive is not None and request.keep_alive.seconds == 0
            if unload:
                await self._manager.stop(model)
            elif self._manager.state(model) != EngineState.READY:
                message = (f"The model `{model}` could not be started. The reason and the engine's log are in the "
                           "ModelDeck window, `modeldeck ps` and the control API.")  # fmt: skip
                raise BadRequest(message, 503)
            reply = OllamaAnswer(listed_name(model), chat, clock).last(whole=True)
            reply.update(done_reason="unload" if unload else "load")
            for name in ("prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration"):
                reply.pop(name)
            await send_whole(send, 200, reply)
            return
        clock.asked()
        answer = await call_core(self._core, scope, receive, request.path, request.payload)
        if answer.status != 200:
            await send_whole(send, answer.status, {"error": error_message(await answer.json())[0]})
            return
        await relay(answer, OllamaAnswer(listed_name(model), chat, clock), send, request.stream)
        await self._after(model, request.keep_alive)

    async def _after(self, model: str, alive: KeepAlive | None) -> None:
        """keep_alive 0: unload the model once nothing else is using it. Other keep_alive values are taken but not
        applied: a model's idle TTL is the service's setting (--model-ttl), not a request's."""
        if alive is None or alive.seconds != 0:
            return
        record = self._manager.describe(model)
        if record["running_requests"] == 0 and record["waiting_requests"] == 0:
            await self._manager.stop(model)

    async def _embed(self, body: dict[str, Any], old: bool, scope: Scope, receive: Receive, send: Send,
                     clock: Clock) -> None:  # fmt: skip
        name, given = embed_inputs(body, old)
        model = self._known(name)
        truncate = body.get("truncate")
        if truncate is not None and not isinstance(truncate, bool):
            raise BadRequest("`truncate` must be true or false.")
        alive = keep_alive(body.get("keep_alive"))
        await self._load(model, clock)
        clock.asked()
        answer = await call_core(self._core, scope, receive, "/v1/embeddings", {"model": model, "input": given})
        reply = await answer.json()
        if answer.status != 200:
            await send_whole(send, answer.status, {"error": error_message(reply)[0]})
            return
        items = sorted(reply.get("data") or [], key=lambda item: item.get("index", 0))
        vectors = [item.get("embedding") for item in items]
        if old:
            await send_whole(send, 200, {"embedding": vectors[0] if vectors else []})
        else:
            usage = reply.get("usage") or {}
            await send_whole(send, 200, {
                "model": listed_name(model), "embeddings": vectors,
                "total_duration": time.perf_counter_ns() - clock.started_ns, "load_duration": clock.load_ns,
                "prompt_eval_count": usage.get("prompt_tokens", 0),
            })  # fmt: skip
        await self._after(model, alive)
