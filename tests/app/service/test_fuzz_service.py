"""Property-based fuzzing of a real service process: /v1 and /api bodies, headers and query strings drawn by
hypothesis. Every answer is under 500 except the documented ones (the Hub offline or failing: 502/503 with a
hub_error), every error is an OpenAI-shaped JSON body, the service logs no traceback and answers afterwards.

Requests that pass every check reach `fuzz`, an --upstream served by a tiny OpenAI-shaped server in this process
(answering at once, so that a valid body costs no generation): the gateway's whole path runs, not only its checks.
Example counts are bounded (a few hundred requests in all) and deadlines off, for a busy machine.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import RunningService, free_port, start_service_process, stop_service_process
from tests.support.standin_http import StandInHandler, serving

# Hypothesis keeps caches in ./.hypothesis, which pytest (with this project's norecursedirs) then refuses to
# collect past: they go to the temporary directory instead, and no example database is kept.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "modeldeck-hypothesis")
FUZZ_SETTINGS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)  # fmt: skip
DOCUMENTED_5XX = {(502, "hub_error"), (503, "hub_error")}  # the Hub unreachable or failing (HF_ENDPOINT is closed)

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(
    json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
models = st.sampled_from(["fuzz", "absent", BUNDLED_ID + "-absent", ""]) | st.text(max_size=12)
content_parts = st.lists(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_audio", "x"])},
                          optional={"text": json_values, "image_url": st.sampled_from(
                              [{"url": "data:image/png;base64,AA=="}, {"url": "http://10.0.0.1/a.png"},
                               {"url": "file:///etc/passwd"}, "http://x", {}, None])}),
    max_size=3,
)  # fmt: skip
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant", "tool", "robot"])},
                          optional={"content": st.text(max_size=40) | content_parts | json_values}),
    max_size=4,
) | json_values  # fmt: skip
FIELDS = {
    "model": models, "messages": messages, "prompt": st.text(max_size=40) | json_values,
    "input": st.text(max_size=40) | st.lists(st.text(max_size=10), max_size=3) | json_values,
    "max_tokens": st.integers(min_value=-5, max_value=2**40) | json_values, "stream": st.booleans() | json_values,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}) | json_values,
    "temperature": st.floats() | json_values, "stop": json_values, "n": json_values, "logprobs": json_values,
    "top_logprobs": json_values, "response_format": json_values, "tools": json_values, "seed": json_values,
    "encoding_format": st.sampled_from(["float", "base64", "x"]), "logit_bias": json_values, "user": json_values,
}  # fmt: skip
v1_bodies = st.fixed_dictionaries({}, optional={name: strategy for name, strategy in FIELDS.items()}).flatmap(
    lambda body: (
        st.dictionaries(st.text(max_size=10), json_values, max_size=2).map(lambda extra: {**extra, **body})
        | st.just(body)
    )
)
sampling = st.fixed_dictionaries({}, optional={
    "temperature": st.floats(0, 2), "top_p": st.floats(0, 1), "max_tokens": st.integers(1, 64),
    "stream": st.booleans(), "seed": st.integers(0, 2**32), "stop": st.text(max_size=5), "user": st.text(max_size=5),
})  # fmt: skip
text_or_parts = st.text(max_size=40) | st.lists(
    st.just({"type": "text", "text": "hi"}) | st.just({"type": "image_url", "image_url": {"url": "data:,x"}}),
    min_size=1, max_size=2,
)  # fmt: skip
valid_exchanges = st.one_of(
    st.tuples(st.just("/v1/chat/completions"), st.fixed_dictionaries({
        "model": st.just("fuzz"), "messages": st.lists(st.fixed_dictionaries({
            "role": st.sampled_from(["system", "user", "assistant"]), "content": text_or_parts,
        }), min_size=1, max_size=3),
    }).flatmap(lambda body: sampling.map(lambda extra: {**body, **extra}))),
    st.tuples(st.just("/v1/completions"), st.fixed_dictionaries({
        "model": st.just("fuzz"), "prompt": st.text(max_size=40),
    }).flatmap(lambda body: sampling.map(lambda extra: {**body, **extra}))),
    st.tuples(st.just("/v1/embeddings"), st.fixed_dictionaries({
        "model": st.just("fuzz"), "input": st.text(max_size=20) | st.lists(st.text(max_size=8), min_size=1, max_size=3),
    }, optional={"encoding_format": st.sampled_from(["float", "base64"])})),
)  # fmt: skip
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
headers = st.dictionaries(
    st.sampled_from(["content-type", "authorization", "origin", "accept", "x-request-id", "expect", "host"]),
    header_text, max_size=3,
)  # fmt: skip
query = st.dictionaries(st.sampled_from(["window", "limit", "tail", "model", "use", "users", "names", "max_points",
                                         "wait", "q", "sort"]), header_text, max_size=3)  # fmt: skip


class _Engine(StandInHandler):
    """An OpenAI-shaped server that answers every POST at once: a completion, a stream, or an embedding."""

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


@pytest.fixture
def fuzz_service(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningService]:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # offline Hub: no network in the fuzz
    with serving(_Engine) as engine:
        service = start_service_process(paths, tmp_path, "--upstream", f"fuzz={engine}")
        try:
            yield service
        finally:
            stop_service_process(service)


def check(answer: httpx.Response, tally: Counter[str]) -> None:
    tally["requests"] += 1
    tally[f"{answer.status_code // 100}xx"] += 1
    if answer.status_code < 400:
        return
    error = answer.json()["error"]  # a JSON error body, OpenAI's shape
    assert isinstance(error["message"], str) and error["message"], answer.text
    if answer.status_code >= 500:
        tally["5xx documented"] += 1
        assert (answer.status_code, error["type"]) in DOCUMENTED_5XX, (answer.status_code, answer.text)


def after_fuzzing(service: RunningService, tally: Counter[str]) -> None:
    assert service.process.poll() is None, "the service died"
    assert service.client.health()["status"] == "ok"
    output = service.output()
    assert "Traceback" not in output and "Internal error" not in output, output[-3000:]
    print(f"\nfuzz: {dict(tally)}")  # for the record: requests tried, answers by class


def test_fuzzed_v1_requests_get_clear_answers(fuzz_service: RunningService) -> None:
    service, tally = fuzz_service, Counter[str]()
    v1 = httpx.Client(base_url=service.url.removesuffix("/v1"), timeout=60, trust_env=False)
    key = {"authorization": f"Bearer {service.api_key}", "content-type": "application/json"}

    routes = st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"]) | st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=20
    ).map(lambda p: "/v1/" + p)
    random_exchanges = st.tuples(routes, v1_bodies.map(lambda b: json.dumps(b).encode()) | st.binary(max_size=200))

    @FUZZ_SETTINGS
    @example(
        exchange=("/v1/chat/completions", b"[" * 100_000 + b"]" * 100_000),
        method="POST",
        extra={},
        params={},
        keyed=True,
    )  # the bomb that was a 500 with a traceback, always tried
    @given(
        exchange=valid_exchanges.map(lambda pair: (pair[0], json.dumps(pair[1]).encode())) | random_exchanges,
        method=st.sampled_from(["POST"] * 8 + ["GET", "PUT", "DELETE", "OPTIONS", "HEAD"]),
        extra=headers | st.just({}), params=query, keyed=st.booleans() | st.just(True),
    )  # fmt: skip
    def request(exchange: tuple[str, bytes], method: str, extra: dict[str, str], params: dict[str, str], keyed: bool
                ) -> None:  # fmt: skip
        route, body = exchange
        sent = {**(key if keyed else {}), **extra}
        try:
            answer = v1.request(method, route, content=body, headers=sent, params=params)
        except httpx.LocalProtocolError:
            return  # a header httpx itself will not send
        if method != "HEAD":
            check(answer, tally)

    try:
        request()
    finally:
        v1.close()
    after_fuzzing(service, tally)
    assert tally["2xx"] > 0 and tally["4xx"] > 0  # the fuzz reached the engine and the checks both


def test_fuzzed_api_requests_get_clear_answers(fuzz_service: RunningService) -> None:
    service, tally = fuzz_service, Counter[str]()
    address = service.client.address
    api = httpx.Client(base_url=address.control_url, timeout=60, trust_env=False)
    routes = [
        ("GET", "/api/health"), ("GET", "/api/models"), ("GET", "/api/metrics"), ("GET", "/api/series"),
        ("GET", "/api/requests"), ("GET", "/api/models/fuzz/logs"), ("GET", "/api/recommend"),
        ("POST", "/api/models/fuzz/start"), ("POST", "/api/models/absent/start"), ("POST", "/api/models/absent/stop"),
        ("GET", "/api/hardware"), ("GET", "/api/settings"), ("PUT", "/api/settings"), ("PUT", "/api/hf-token"),
        ("POST", "/api/remotes"), ("GET", "/api/remotes"), ("DELETE", "/api/remotes/absent"),
        ("POST", "/api/downloads"), ("GET", "/api/downloads"), ("POST", "/api/downloads/absent/pause"),
        ("GET", "/api/library"), ("POST", "/api/library/import"), ("POST", "/api/library/absent/verify"),
        ("GET", "/api/hub/search"), ("GET", "/api/hub/models/org/absent"), ("GET", "/api/bench"),
        ("POST", "/api/bench"), ("GET", "/api/bench/cards/absent"), ("GET", "/metrics"), ("PATCH", "/api/models"),
        ("GET", "/api/models/fuzz/settings"), ("PUT", "/api/models/fuzz/settings"),
        ("POST", "/api/models/fuzz/settings/estimate"), ("PUT", "/api/models/absent/settings"),
        ("PUT", f"/api/models/{BUNDLED_ID}/settings"), ("POST", f"/api/models/{BUNDLED_ID}/settings/estimate"),
        # not POST .../llama-server/build: it would start a real build (pip download, cmake) under the fuzz
        ("GET", "/api/engines/builds"), ("POST", "/api/engines/llama-server/build/cancel"),
        ("POST", "/api/engines/absent/build"),
    ]  # fmt: skip
    safe_values = json_values.filter(lambda v: not (isinstance(v, str) and v.startswith(("http", "/"))))

    @FUZZ_SETTINGS
    @given(
        route=st.sampled_from(routes), params=query, extra=headers,
        body=st.dictionaries(st.sampled_from(["model", "url", "name", "api_key", "context", "engine", "threads",
                                              "repo_id", "path", "concurrency", "theme", "cors_origins", "token",
                                              "idle_ttl_s", "gateway_port"]) | st.text(max_size=8),
                             safe_values, max_size=4).map(lambda b: json.dumps(b).encode())
        | st.binary(max_size=100),
    )  # fmt: skip
    def request(route: tuple[str, str], params: dict[str, str], extra: dict[str, str], body: bytes) -> None:
        method, path = route
        sent = {**extra, "authorization": f"Bearer {address.token}", "host": "127.0.0.1"}
        try:
            answer = api.request(method, path, content=body if method != "GET" else b"", headers=sent, params=params)
        except httpx.LocalProtocolError:
            return
        if path != "/metrics" or answer.status_code >= 400:
            check(answer, tally)

    try:
        request()
    finally:
        api.close()
    after_fuzzing(service, tally)
    assert tally["2xx"] > 0 and tally["4xx"] > 0
