"""What the fuzz test (tests/app/service/test_fuzz_service.py) and the long fuzz run (tests/bench/fuzz_long.py) send to
a real service and how they judge its answers: requests drawn by hypothesis from the route tables of both listeners
(app.service.gateway.gateway_routes.ROUTES, app.service.control.control.api_routes), so that a route added later is
fuzzed without anyone listing it here.

Path parameters are filled with generated segments and with real ids of the running service; bodies, headers and
query strings hold wrong types, huge and nested values, lone surrogates, NULs and numbers at the edges (2**63,
-0.0, 1e308, NaN and Infinity as JSON tokens and as text). Every request goes to loopback only: no body value
is a URL or a path other than a few harmless ones listed here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx
from hypothesis import strategies as st

from app.service.control.control import api_routes
from app.service.gateway.gateway_routes import ROUTES as GATEWAY_ROUTES
from app.service.http.routes import RoutePattern
from tests.support.service import RunningService
from tests.support.standin_http import StandInHandler

Listener = Literal["v1", "api"]
GENERATING = frozenset({"/v1/chat/completions", "/v1/completions"})
STAND_IN = "fuzz"  # the model of the --upstream stand-in (FuzzUpstream), which answers at once
LONG_BODY = 2048  # bytes: a longer body naming the real model goes to the stand-in
SMALL_MAX_TOKENS = (1, 2, 4)  # a valid request on the real model generates for a moment, not for its context

# Routes never fuzzed, and why; every other route of both tables is.
NOT_FUZZED: dict[RoutePattern, str] = {
    ("POST", "/api/shutdown"): "it stops the service under the fuzz",
    ("POST", "/api/key/regenerate"): "it replaces the endpoint's key under the fuzz (tests/app/test_settings.py)",
    ("GET", "/api/events"): "an event stream that never ends (its HEAD is fuzzed)",
}
# Routes fuzzed only with requests that can start nothing long: no real model id in the body of a start of a benchmark
# or quality run (minutes of generation: tests/app/service/jobs/test_bench_service.py, test_quality_service.py), and no
# engine build (pip download, cmake: test_engine_build_service.py) asked for an engine that exists.
FUZZ_TIMEOUT_S = 120.0  # an answer slower than this is silence
JOB_STARTS = frozenset({"/api/bench", "/api/quality"})  # POSTed
NO_REAL_ENGINE: frozenset[RoutePattern] = frozenset({("POST", "/api/engines/{}/build")})
ENGINE_NAMES = ("llama-server", "llama-cpp-python", "vllm", "sglang")
# Starting or stopping the real model's engine costs seconds of a 2-core machine each time: only generated ids and
# the stand-in upstream's model in these paths.
NO_REAL_MODEL: frozenset[RoutePattern] = frozenset({("POST", "/api/models/{}/start"), ("POST", "/api/models/{}/stop")})
OTHER_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")

LONE_SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff")
EDGE_INTS = (0, -1, 1, 2**31, 2**31 - 1, 2**53 + 1, 2**63, 2**63 - 1, -(2**63), -(2**63) - 1, 2**64, 10**30)
EDGE_FLOATS = (-0.0, 0.5, 1e308, -1e308, 5e-324, 1e-308, 2.0**63)
RAW_TOKENS = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1E400",
    "-0",
    "0.0e0",
    "123456789012345678901234567890",
)
_RAW = "\x00raw:"  # a string that json.dumps writes, quoted, in place of a raw token: see `dump`
NUMBER_TEXTS = ("NaN", "nan", "Infinity", "-inf", "1e308", "1e999", "-0", "-0.0", "9223372036854775808", "²", "0x10",
                " 1", "1_000", "")  # fmt: skip
HARMLESS_PATHS = ("/" + "a" * 5000 + ".gguf", "/nonexistent/model.gguf", "/etc/passwd", "/dev/zero", "/proc/self/mem",
                  "/tmp/\x00.gguf", "relative/model.gguf", "/" + "d/" * 600 + "m.gguf")  # fmt: skip


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = {"a": value}
    return value


_special_texts = st.sampled_from(
    [*LONE_SURROGATES, "a\x00b", "\x00", "\U0001f600", "\ufeff", "\u202e", "..", "../../etc/passwd", "%00", "%2F",
     "\r\n", "CON", " ", "a" * 300, "é" * 2000, *NUMBER_TEXTS]
) | st.sampled_from(["a" * 20_000, "[" * 5000]) | st.sampled_from(HARMLESS_PATHS)  # fmt: skip
texts = (
    st.text(max_size=24)
    | st.text(st.characters(codec="utf-8"), max_size=12)
    | st.tuples(st.text(max_size=6), st.sampled_from(LONE_SURROGATES), st.text(max_size=6)).map("".join)
    | _special_texts
).filter(lambda text: not _leaves_loopback(text))
numbers = (
    st.sampled_from(EDGE_INTS) | st.sampled_from(EDGE_FLOATS) | st.integers() | st.floats()
    | st.sampled_from(RAW_TOKENS).map(lambda token: _RAW + token)
)  # fmt: skip
scalars = st.none() | st.booleans() | numbers | texts
_trees = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4), max_leaves=12
)
_large = st.sampled_from([_nested(64), _nested(65), _nested(70), list(range(3000)), {str(n): n for n in range(500)},
                          [[[[[[[[[[]]]]]]]]]] * 200])  # fmt: skip
json_values = st.integers(0, 9).flatmap(lambda n: _large if n == 0 else _trees)  # a huge or deep one now and then


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` three times in four, else `odd`: an odd value deep inside a body still gets past the outer checks."""
    return st.integers(0, 3).flatmap(lambda n: odd if n == 0 else usual)


def _leaves_loopback(text: str) -> bool:
    """Whether a value could make the service reach off this machine (a remote's URL, a folder to scan)."""
    lowered = text.strip().lower()
    return "://" in lowered or lowered.startswith(("http", "www.", "~")) or (
        lowered.startswith("/") and text not in HARMLESS_PATHS)  # fmt: skip


def dump(value: Any) -> bytes:
    """`value` as JSON, as json.dumps writes it (a lone surrogate as its `\\ud800` escape, NaN as a bare token),
    with each raw token put in unquoted: `1e999`, `-0`."""
    text = json.dumps(value)
    if "\\u0000raw:" in text:
        text = re.sub(r'"\\u0000raw:([^"]*)"', r"\1", text)
    return text.encode()


V1_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "messages": st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant", "tool", "robot"])},
            optional={"content": texts | json_values | st.lists(st.fixed_dictionaries(
                {"type": st.sampled_from(["text", "image_url", "input_audio", "x"])},
                optional={"text": texts | json_values, "image_url": st.sampled_from(
                    [{"url": "data:image/png;base64,AA=="}, {"url": "data:,x"}, "data:", {}, None])},
            ), max_size=3), "name": texts | json_values, "tool_calls": json_values},
        ), max_size=4,
    ) | json_values,
    "prompt": texts | st.lists(texts, max_size=3) | json_values,
    "input": texts | st.lists(texts, max_size=3) | json_values,
    "max_tokens": st.sampled_from(SMALL_MAX_TOKENS) | numbers | json_values,
    "max_completion_tokens": st.sampled_from(SMALL_MAX_TOKENS) | numbers,
    "stream": st.booleans() | json_values,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans() | json_values}) | json_values,
    "stop": texts | st.lists(texts, max_size=5) | json_values,
    "encoding_format": st.sampled_from(["float", "base64", "x"]) | json_values,
    **{name: numbers | json_values for name in ("temperature", "top_p", "top_k", "min_p", "n", "seed", "best_of",
                                                "presence_penalty", "frequency_penalty", "repeat_penalty")},
    **{name: json_values for name in ("logprobs", "top_logprobs", "user", "suffix", "echo")},
    # Near the shapes OpenAI takes, so that one odd part inside passes the outer checks and reaches what is behind.
    "tools": st.lists(st.fixed_dictionaries({
        "type": _mostly(st.just("function"), json_values),
        "function": st.fixed_dictionaries({
            "name": _mostly(st.just("f"), texts),
            "parameters": json_values | st.just({"type": "object", "properties": {"x": {"type": "string"}}}),
        }, optional={"description": texts | json_values, "strict": json_values}),
    }), max_size=2) | json_values,
    "tool_choice": st.sampled_from(["none", "auto", "required"]) | st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries({"name": texts})}) | json_values,
    "response_format": st.fixed_dictionaries({"type": st.sampled_from(["json_object", "json_schema", "text", "x"])},
                                             optional={"json_schema": json_values, "schema": json_values})
    | json_values,
    "logit_bias": st.dictionaries(st.sampled_from(EDGE_INTS).map(str) | st.integers(0, 60_000).map(str),
                                  numbers, max_size=3) | json_values,
}  # fmt: skip
API_FIELDS = (
    "model", "url", "name", "api_key", "path", "link", "repo", "variant", "file", "revision", "token", "engine",
    "context", "gpu_layers", "threads", "batch", "parallel", "concurrency", "prompt_tokens", "output_tokens",
    "requests", "prompt_mode", "prefix_tokens", "seed", "variants", "reference", "data", "tokens", "theme",
    "cors_origins", "idle_ttl_s", "gateway_port", "control_port", "bind_address", "models_dir",
    "confirm_lan_exposure", "log_request_text",
)  # fmt: skip
QUERY_NAMES = ("window", "limit", "tail", "model", "use", "users", "names", "max_points", "wait", "q", "sort", "a",
               "b", "author", "filter")  # fmt: skip
# Header values as RFC 9110 allows them (visible ASCII, spaces, obs-text bytes): control characters are refused by
# the HTTP servers before the apps, uvicorn's with a bare-text 400 (app/service/http/uvicorn_cap.py).
header_values = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40).map(str.encode) | st.binary(
    max_size=20
).filter(lambda raw: not re.search(rb"[\x00-\x08\x0a-\x1f\x7f]", raw))
query_values = header_values.map(lambda v: v.decode("latin-1")) | st.sampled_from(
    [*NUMBER_TEXTS, *(str(n) for n in EDGE_INTS), "a" * 5000]
)


@dataclass(frozen=True)
class FuzzRequest:
    """One request drawn for a listener: `route` is the table's pattern it was drawn from (None: a made-up path)."""

    listener: Listener
    route: RoutePattern | None
    method: str
    path: str
    body: bytes
    headers: dict[str, bytes]
    query: dict[str, str]

    def __repr__(self) -> str:  # hypothesis prints it for a failing example: short enough to read
        return f"{self.method} {self.path[:300]} query={self.query} headers={self.headers} body={self.body[:600]!r}"


def fuzzed_routes() -> dict[Listener, list[RoutePattern]]:
    """The routes of both listeners' tables that are fuzzed (all but NOT_FUZZED)."""
    return {
        "v1": [route for route in GATEWAY_ROUTES if route not in NOT_FUZZED],
        "api": [route for route in api_routes() if route not in NOT_FUZZED],
    }


def requests(model_ids: Sequence[str], other_ids: Sequence[str], real_models: Collection[str]) -> st.SearchStrategy[
        FuzzRequest]:  # fmt: skip
    """Requests to either listener. `model_ids`: the service's models (in paths, and in /v1 bodies);
    `other_ids`: more real ids for path parameters (cards, downloads, remotes, engines); `real_models`: models served
    by a real engine, whose valid generation requests get a small max_tokens."""
    routes = fuzzed_routes()
    ids = list(dict.fromkeys([*model_ids, *other_ids, *ENGINE_NAMES]))
    listeners: tuple[Listener, ...] = ("v1", "api")
    return st.sampled_from(listeners).flatmap(
        lambda listener: _request(listener, routes[listener], ids, model_ids, real_models)
    )


def _segment(real: Sequence[str]) -> st.SearchStrategy[str]:
    made = texts | st.sampled_from(["", "x", "a" * 300, "a" * 9000, "%00", "%2F", "%ED%A0%80", ".", ".."])
    return (st.sampled_from(real) if real else made) | made


def _request(listener: Listener, routes: list[RoutePattern], ids: Sequence[str], model_ids: Sequence[str],
             real_models: Collection[str]) -> st.SearchStrategy[FuzzRequest]:  # fmt: skip
    made_up = st.lists(_segment(ids), min_size=1, max_size=4).map(
        lambda parts: (None, f"/{listener}/" + "/".join(quote(p, safe="%", errors="surrogatepass") for p in parts))
    )
    from_table = st.sampled_from(routes).flatmap(lambda route: _fill(route, ids, real_models))
    drawn = st.integers(0, 4).flatmap(lambda n: made_up if n == 0 else from_table)
    methods = st.none() | st.none() | st.none() | st.sampled_from(OTHER_METHODS)  # mostly the route's own
    queries = st.dictionaries(st.sampled_from(QUERY_NAMES), query_values, max_size=3)
    return drawn.flatmap(lambda route_path: st.builds(
        _build, st.just(listener), st.just(route_path), methods, _bodies(listener, route_path[1], model_ids),
        _headers(), queries, st.just(frozenset(real_models)),
    ))  # fmt: skip


def _fill(
    route: RoutePattern, ids: Sequence[str], real_models: Collection[str]
) -> st.SearchStrategy[tuple[RoutePattern, str]]:
    pattern = route[1]
    real = [i for i in ids if not (route in NO_REAL_ENGINE and i in ENGINE_NAMES)]
    real = [i for i in real if not (route in NO_REAL_MODEL and i in real_models)]
    pieces = pattern.split("/")
    filled = [
        _segment(real).map(lambda p: quote(p, safe="", errors="surrogatepass"))
        if piece == "{}"
        else st.lists(_segment(real), min_size=1, max_size=3).map(
            lambda ps: "/".join(quote(p, safe="", errors="surrogatepass") for p in ps)
        )
        if piece == "{...}"
        else st.just(piece)
        for piece in pieces
    ]
    return st.tuples(*filled).map(lambda parts: (route, "/".join(parts)))


def _bodies(listener: Listener, path: str, model_ids: Sequence[str]) -> st.SearchStrategy[bytes]:
    if listener == "v1":
        models = st.sampled_from([*model_ids, "absent", ""]) | texts
        fields = {"model": models, **V1_FIELDS}
        objects = st.fixed_dictionaries({}, optional=fields) | st.fixed_dictionaries(
            {"model": models}, optional=V1_FIELDS
        )
    elif path in JOB_STARTS:  # no real model: no run starts (JOB_STARTS)
        objects = st.dictionaries(st.sampled_from(API_FIELDS) | texts, json_values, max_size=5)
    else:  # a real model id now and then, as a value and as `model`, to get past the routes' first check
        values = json_values | st.sampled_from(model_ids)
        named = st.fixed_dictionaries({}, optional={"model": st.sampled_from(model_ids)})
        objects = st.tuples(st.dictionaries(st.sampled_from(API_FIELDS) | texts, values, max_size=5), named).map(
            lambda pair: {**pair[0], **pair[1]}
        )
    extra = st.dictionaries(texts, json_values, max_size=2)
    made = st.one_of(
        st.tuples(objects, extra | st.just({})).map(lambda pair: dump({**pair[1], **pair[0]})),
        json_values.map(dump), st.binary(max_size=200), st.just(b""),
    )  # fmt: skip
    if listener == "v1" and path in VALID_BODIES:  # often enough valid, or valid but one field, that the engines
        valid = VALID_BODIES[path](st.sampled_from(model_ids))  # whole path runs too
        one_odd = valid.flatmap(lambda body: st.sampled_from(sorted(V1_FIELDS)).flatmap(
            lambda name: V1_FIELDS[name].map(lambda odd: {**body, name: odd})))  # fmt: skip
        return st.one_of(made, valid.map(dump), one_odd.map(dump), one_odd.map(dump))
    return made


plain = st.text(st.characters(codec="utf-8", exclude_categories=["Cc", "Cs"]), min_size=1, max_size=30)
sampling = st.fixed_dictionaries({}, optional={
    "temperature": st.floats(0, 2), "top_p": st.floats(0, 1), "max_tokens": st.sampled_from(SMALL_MAX_TOKENS),
    "stream": st.booleans(), "seed": st.integers(0, 2**32), "stop": plain, "user": plain,
    "stream_options": st.just({"include_usage": True}),
})  # fmt: skip
VALID_BODIES: dict[str, Callable[[st.SearchStrategy[str]], st.SearchStrategy[dict[str, Any]]]] = {
    "/v1/chat/completions": lambda models: st.fixed_dictionaries({
        "model": models, "messages": st.lists(st.fixed_dictionaries({
            "role": st.sampled_from(["system", "user", "assistant"]),
            "content": plain | st.lists(st.just({"type": "text", "text": "hi"}), min_size=1, max_size=2),
        }), min_size=1, max_size=3),
    }).flatmap(lambda body: sampling.map(lambda extra: {**body, **extra})),
    "/v1/completions": lambda models: st.fixed_dictionaries({"model": models, "prompt": plain}).flatmap(
        lambda body: sampling.map(lambda extra: {**body, **extra})),
    "/v1/embeddings": lambda models: st.fixed_dictionaries(
        {"model": models, "input": plain | st.lists(plain, min_size=1, max_size=3)},
        optional={"encoding_format": st.sampled_from(["float", "base64"])}),
}  # fmt: skip


def _headers() -> st.SearchStrategy[dict[str, bytes]]:
    names = st.sampled_from(["content-type", "authorization", "origin", "accept", "x-request-id", "expect", "host",
                             "accept-encoding", "cookie", "content-encoding"])  # fmt: skip
    content_types = st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", "",
                                     "APPLICATION/JSON", "multipart/form-data"])  # fmt: skip
    return st.fixed_dictionaries({}, optional={"content-type": content_types.map(str.encode)}) | st.dictionaries(
        names, header_values, max_size=3
    )


def _build(listener: Listener, drawn: tuple[RoutePattern | None, str], other_method: str | None, body: bytes,
           headers: dict[str, bytes], query: dict[str, str], real_models: frozenset[str]
           ) -> FuzzRequest:  # fmt: skip
    route, path = drawn
    method = other_method or (route[0] if route else "POST")
    if route is not None and route[1] in GENERATING and method == "POST":
        body = _bounded(body, real_models)
    return FuzzRequest(listener, route, method, path, body, headers, query)


def _bounded(body: bytes, real_models: frozenset[str]) -> bytes:
    """`body` with a small max_tokens where it names a real model and would be served: a fuzzed request must not
    generate a whole context."""
    try:
        value = json.loads(body)
    except ValueError:
        return body
    if not isinstance(value, dict) or value.get("model") not in real_models:
        return body
    if len(body) > LONG_BODY:  # thousands of prompt tokens take the real engine a minute on 2 cores
        return dump({**value, "model": STAND_IN})
    small = SMALL_MAX_TOKENS[len(body) % len(SMALL_MAX_TOKENS)]
    for name in ("max_tokens", "max_completion_tokens"):
        drawn = value.get(name, 0)  # 0: absent, and refused if sent
        if drawn is None or (isinstance(drawn, int) and not isinstance(drawn, bool) and drawn >= 1):
            value[name] = small
    if "max_tokens" not in value and "max_completion_tokens" not in value:
        value["max_tokens"] = small
    return dump(value)


@dataclass
class Tally:
    """Answers counted by class ("2xx", ...), and the problems seen (each a line)."""

    counts: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        five = self.counts["5xx"]
        classes = ", ".join(f"{name} {self.counts[name]}" for name in sorted(self.counts) if name != "5xx")
        return f"5xx {five} (problems {len(self.problems)}), {classes}"


class FuzzUpstream(StandInHandler):
    """An OpenAI-shaped server that answers every POST at once (a completion, a stream, or an embedding): behind
    --upstream, valid requests to its model run the gateway's whole path without costing a generation."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if self.path.endswith("/embeddings"):
            answer = {"object": "list", "data": [{"index": 0, "embedding": [0.5, 0.5]}], "usage": usage}
        else:
            answer = {"id": "x", "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "ok"}, "text": "ok", "finish_reason": "stop"}
            ], "usage": usage}  # fmt: skip
        if body.get("stream") is True:
            self.send_body(200, b"data: " + json.dumps(answer).encode() + b"\n\ndata: [DONE]\n\n", "text/event-stream")
        else:
            self.send_json(200, answer)


def fuzz_clients(service: RunningService) -> dict[Listener, httpx.Client]:
    """A client for each listener, with its key and a JSON content type unless a request's own headers differ."""
    address = service.client.address
    return {
        "v1": httpx.Client(base_url=service.url.removesuffix("/v1"), timeout=FUZZ_TIMEOUT_S, trust_env=False, headers={
            "authorization": f"Bearer {service.api_key}", "content-type": "application/json"}),
        "api": httpx.Client(base_url=address.control_url, timeout=FUZZ_TIMEOUT_S, trust_env=False, headers={
            "authorization": f"Bearer {address.token}", "content-type": "application/json"}),
    }  # fmt: skip


def real_ids(service: RunningService) -> tuple[list[str], list[str]]:
    """The running service's model ids, and its other ids a path may name: saved cards, downloads, remotes."""
    client = service.client
    models = [model["id"] for model in client.models()]
    others: list[str] = []
    with fuzz_clients(service)["api"] as api:
        for kind in ("bench", "quality"):
            others += [card["id"] for card in api.get(f"/api/{kind}").json().get("cards", [])]
        others += [download["id"] for download in api.get("/api/downloads").json()]
        others += [remote["name"] for remote in api.get("/api/remotes").json()]
    return models, others


def send(clients: dict[Listener, httpx.Client], request: FuzzRequest) -> httpx.Response | None:
    """Send `request`; None for one httpx itself will not send (a header it refuses)."""
    try:
        return clients[request.listener].request(
            request.method, request.path, content=request.body if request.method not in ("GET", "HEAD") else b"",
            headers=[(name.encode(), value) for name, value in request.headers.items()], params=request.query,
        )  # fmt: skip
    except (httpx.LocalProtocolError, httpx.InvalidURL):
        return None


def judge(request: FuzzRequest, answer: httpx.Response, tally: Tally) -> str | None:
    """Count the answer; what is wrong with it, or None: a 5xx other than an honest 503 with Retry-After (the Hub
    offline is one), or an error that is no OpenAI-shaped JSON body."""
    status = answer.status_code
    tally.counts["requests"] += 1
    tally.counts[f"{status // 100}xx"] += 1
    tally.counts[f"{request.listener} {status // 100}xx"] += 1
    problem = _problem(request, answer)
    if problem is not None:
        tally.problems.append(f"{problem}: {request!r}")
    return problem


def _ollamas(request: FuzzRequest, answer: httpx.Response) -> bool:
    """Whether the endpoint's Ollama dialect answered: its root and `/api/...` (a made-up `/v1/..` path lands there)."""
    path = answer.request.url.path
    return request.listener == "v1" and (path == "/" or path.startswith("/api/"))


def _problem(request: FuzzRequest, answer: httpx.Response) -> str | None:
    status = answer.status_code
    if status < 400 or request.method == "HEAD":
        return None
    try:
        error = answer.json()["error"]
        if _ollamas(request, answer) and isinstance(error, str):  # Ollama's shape, on the paths of its API
            error = {"type": "ollama", "message": error}
        kind, message = error["type"], error["message"]
    except (ValueError, KeyError, TypeError):
        return f"{status} without an OpenAI-shaped JSON error: {answer.text[:300]!r}"
    if not isinstance(message, str) or not message or not isinstance(kind, str) or not kind:
        return f"{status} with an empty message or type"
    if status < 500:
        return None
    if status == 503 and answer.headers.get("retry-after"):
        return None
    return f"{status} {answer.text[:300]}"
