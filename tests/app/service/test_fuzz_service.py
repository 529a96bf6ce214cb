"""Property-based fuzzing of a real service process: requests drawn by hypothesis from the route tables of both
listeners (tests/support/fuzz_strategies.py, shared with the long run by hand, tests/bench/fuzz_long.py), so that
a route added later is fuzzed without anyone listing it. No answer is a 5xx but an honest 503 with Retry-After (the
Hub offline is one: HF_ENDPOINT is closed), every error is an OpenAI-shaped JSON body, the service logs no traceback
and answers afterwards.

The service serves the bundled model on llama-cpp-python (valid generation requests to it get a small
max_tokens) and `fuzz`, an --upstream served by a tiny OpenAI-shaped server in this process that answers at once,
so that most valid bodies run the gateway's whole path without costing a generation. The routes never fuzzed and
the ids kept out of some paths, each with its reason, are in fuzz_strategies (NOT_FUZZED, NO_REAL_ENGINE,
NO_REAL_MODEL). Examples are bounded (a few hundred requests) and deadlines off, for a busy machine.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis.configuration import set_hypothesis_home_dir

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.fuzz_strategies import (
    STAND_IN,
    FuzzRequest,
    FuzzUpstream,
    Tally,
    dump,
    fuzz_clients,
    judge,
    real_ids,
    requests,
    send,
)
from tests.support.service import RunningService, free_port, start_service_process, stop_service_process
from tests.support.standin_http import serving

# Hypothesis keeps caches in ./.hypothesis, which pytest (with this project's norecursedirs) then refuses to
# collect past: they go to the temporary directory instead, and no example database is kept.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "modeldeck-hypothesis")
FUZZ_SETTINGS = settings(
    max_examples=800, deadline=None, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)  # fmt: skip
ALWAYS_TRIED = [  # answers that were 5xx once, tried in every run
    FuzzRequest("v1", ("POST", "/v1/chat/completions"), "POST", "/v1/chat/completions",
                b"[" * 100_000 + b"]" * 100_000, {}, {}),  # a 500 with a traceback: json.loads' RecursionError
    FuzzRequest("v1", ("POST", "/v1/chat/completions"), "POST", "/v1/chat/completions", dump(
        {"model": BUNDLED_ID, "max_tokens": 1, "stream": True, "messages": [{"role": "user", "content": "\ud800"}]}
    ), {}, {}),  # the engine's 502 (500 unstreamed): a lone surrogate it cannot encode
    FuzzRequest("api", ("POST", "/api/library/import"), "POST", "/api/library/import",
                dump({"path": "/" + "a" * 5000 + ".gguf"}), {}, {}),  # a bare-text 500: ENAMETOOLONG
    FuzzRequest("v1", None, "POST", "/v1/..", b"", {}, {}),  # lands on Ollama's root: its error shape, not OpenAI's
]  # fmt: skip


@pytest.fixture
def fuzz_service(paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunningService]:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # offline Hub: no network in the fuzz
    with serving(FuzzUpstream) as upstream:
        service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--upstream", f"{STAND_IN}={upstream}")
        try:
            assert service.model()["state"] == "ready", service.output()[-3000:]
            yield service
        finally:
            stop_service_process(service)


def test_fuzzed_requests_to_both_listeners_get_clear_answers(fuzz_service: RunningService) -> None:
    service, tally = fuzz_service, Tally()
    model_ids, other_ids = real_ids(service)
    clients = fuzz_clients(service)

    @FUZZ_SETTINGS
    @given(request=requests(model_ids, other_ids, {BUNDLED_ID}))
    def fuzz(request: FuzzRequest) -> None:
        answer = send(clients, request)
        if answer is not None:
            problem = judge(request, answer, tally)
            assert problem is None, problem

    for always in ALWAYS_TRIED:
        fuzz = example(request=always)(fuzz)
    try:
        fuzz()
    finally:
        for client in clients.values():
            client.close()
    assert service.process.poll() is None, "the service died"
    assert service.client.health()["status"] == "ok"
    output = service.output()
    assert "Traceback" not in output and "Internal error" not in output, output[-3000:]
    print(f"\nfuzz: {tally.summary()}")  # for the record: answers by class
    for listener in ("v1", "api"):  # the fuzz reached the handlers and the checks both, on each listener
        assert tally.counts[f"{listener} 2xx"] > 0 and tally.counts[f"{listener} 4xx"] > 0, tally.counts
