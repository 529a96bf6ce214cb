"""The /v1 gateway as clients see it, on the real service and engine with the bundled model."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.planner.defaults import DEFAULT_CONTEXT, default_plan
from app.planner.facts import facts_from_gguf
from app.planner.memory import llama_cpp_memory
from engines.gguf import read_gguf_info
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

MESSAGES = [{"role": "user", "content": "Write a short poem about the sea."}]
SECRET_MESSAGES = [{"role": "user", "content": "Tell me about the quartz-zebra-1729 lighthouse."}]
SECRET_PROMPT = "The password of the quartz-zebra-4913 vault is"


def raw_post(service: RunningService, path: str, content: bytes, **headers: str) -> httpx.Response:
    base = {"Authorization": f"Bearer {service.api_key}", "Content-Type": "application/json"}
    return httpx.post(f"{service.url}{path}", content=content, headers={**base, **headers}, timeout=60)


def test_include_usage_is_honoured_although_the_engine_ignores_it(service: RunningService) -> None:
    client = service.openai_client()
    plain = client.chat.completions.create(model=BUNDLED_ID, messages=MESSAGES, max_tokens=12, temperature=0)
    chunks = list(client.chat.completions.create(
        model=BUNDLED_ID, messages=MESSAGES, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))  # fmt: skip
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    final = chunks[-1]
    assert final.choices == [] and final.usage is not None
    assert final.usage.completion_tokens == len(content_chunks)
    assert plain.usage is not None and final.usage.prompt_tokens == plain.usage.prompt_tokens
    assert final.usage.total_tokens == final.usage.prompt_tokens + final.usage.completion_tokens
    without = list(client.chat.completions.create(model=BUNDLED_ID, messages=MESSAGES, max_tokens=4, stream=True))
    assert all(chunk.usage is None for chunk in without)


def test_async_client_streams_and_completes(service: RunningService) -> None:
    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=service.url, api_key=service.api_key, max_retries=0) as client:
            stream = await client.completions.create(model=BUNDLED_ID, prompt="Once upon a time", max_tokens=8,
                                                     stream=True)  # fmt: skip
            text = "".join([chunk.choices[0].text async for chunk in stream if chunk.choices])
            reply = await client.chat.completions.create(model=BUNDLED_ID, messages=MESSAGES, max_tokens=8)
            return text, reply.choices[0].message.content or ""

    streamed, replied = asyncio.run(run())
    assert streamed.strip() and replied.strip()


def test_embeddings(service: RunningService) -> None:
    result = service.openai_client().embeddings.create(model=BUNDLED_ID, input=["the sea", "a tax form"])
    first, second = (item.embedding for item in result.data)
    assert len(first) == len(second) > 100
    assert math.isclose(math.fsum(v * v for v in first), 1.0, rel_tol=1e-3)
    assert first != second


@pytest.mark.parametrize(
    ("body", "headers", "status"),
    [
        (b"{not json", {}, 400),
        (b'{"model": "smollm2-135m-instruct", "messages": "hello"}', {}, 400),
        (b'{"messages": [{"role": "user", "content": "x"}]}', {}, 400),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', {}, 404),
        (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}]}',
         {"Content-Type": "text/plain"}, 415),
        (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}], "n": 1000000}', {}, 400),
        (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}], '
         b'"max_tokens": 1000000000}', {}, 400),
        (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}], "lora_path": "/x"}',
         {}, 400),
        (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "x"}], "logprobs": true}',
         {}, 400),
        (b'{"model": "smollm2-135m-instruct", "messages": [{"role": "user", "content": "' + b"x" * (5 << 20)
         + b'"}]}', {}, 413),
    ],
)  # fmt: skip
def test_bad_requests_get_openai_errors(
    service: RunningService, body: bytes, headers: dict[str, str], status: int
) -> None:
    reply = raw_post(service, "/chat/completions", body, **headers)
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["message"] and error["type"]
    assert "Traceback" not in reply.text
    assert service.client.health()["status"] == "ok"


def test_no_cors_grant_by_default(service: RunningService) -> None:
    preflight = httpx.options(f"{service.url}/chat/completions", timeout=10, headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})  # fmt: skip
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    simple = httpx.get(f"{service.url}/models", timeout=10, headers={
        "Origin": "https://evil.example", "Authorization": f"Bearer {service.api_key}"})  # fmt: skip
    assert "access-control-allow-origin" not in simple.headers


def test_listed_origin_gets_a_cors_grant(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--cors-origin", "http://localhost:3000")
    try:
        preflight = httpx.options(f"{service.url}/chat/completions", timeout=10, headers={
            "Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"})  # fmt: skip
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == "http://localhost:3000"
        assert "access-control-allow-credentials" not in preflight.headers
        other = httpx.options(f"{service.url}/chat/completions", headers={"Origin": "http://localhost:4000"})
        assert other.status_code == 403
    finally:
        stop_service_process(service)


def test_client_disconnect_frees_the_engine(service: RunningService) -> None:
    with httpx.stream("POST", f"{service.url}/completions", timeout=60, headers={
        "Authorization": f"Bearer {service.api_key}"}, json={
        "model": BUNDLED_ID, "prompt": "A long story:", "max_tokens": 3000, "stream": True}) as stream:  # fmt: skip
        lines = stream.iter_lines()
        assert sum(1 for line, _ in zip(lines, range(6), strict=False) if line.startswith("data: ")) >= 3
    wait_for(lambda: service.model()["running_requests"] == 0, 10, "no running request")
    reply = service.openai_client().completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=4)
    assert reply.choices[0].text
    records = service.client.logs(BUNDLED_ID, 2000)
    # llama.cpp reports each generation's token count; the abandoned one stopped far short of 3000
    runs = [int(line.split("/")[1].split()[0]) for line in records if "llama_perf_context_print" in line
            and " eval time" in line and "prompt" not in line]  # fmt: skip
    assert runs and max(runs) < 1000
    statuses = [r["status"] for r in httpx.get(
        service.client.address.control_url + "/api/requests", timeout=10,
        headers={"Authorization": f"Bearer {service.client.address.token}"}).json()]  # fmt: skip
    assert statuses[-2:] == [499, 200]


def test_connections_to_the_engine_are_kept_alive(service: RunningService) -> None:
    client = service.openai_client()
    for _ in range(2):
        client.completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=2)
        list(client.completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=2, stream=True))
    port = service.model()["port"]
    gateway = psutil.Process(service.process.pid)
    to_engine = [c for c in gateway.net_connections("tcp") if c.raddr and c.raddr.port == port]
    # Reused, not one per request: a connection still finishing a stream's end may be joined by a second one.
    assert to_engine and all(c.status == psutil.CONN_ESTABLISHED for c in to_engine)
    assert len(to_engine) < 4
    time.sleep(6)  # past the engine's keep-alive timeout (uvicorn's 5 s): it closes the idle connection
    assert client.completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=2).choices[0].text is not None


def test_engine_killed_mid_stream_ends_stream_with_error(service: RunningService) -> None:
    client = service.openai_client()
    stream = client.chat.completions.create(model=BUNDLED_ID, messages=MESSAGES, max_tokens=2000, stream=True)

    def read_and_kill_engine() -> None:
        for received, _ in enumerate(stream, start=1):
            if received == 3:
                os.kill(int(service.model()["pid"]), signal.SIGKILL)

    with pytest.raises(openai.APIError) as error:
        read_and_kill_engine()
    assert "engine" in str(error.value).lower()
    # the next request waits for the restart instead of failing
    assert client.completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=4).choices[0].text


def test_eight_clients_on_a_one_at_a_time_engine_all_complete_in_order(service: RunningService) -> None:
    first_token: dict[int, float] = {}
    finished: dict[int, str | None] = {}

    def stream(index: int) -> None:
        client = service.openai_client()
        finish = None
        for chunk in client.chat.completions.create(model=BUNDLED_ID, messages=MESSAGES, max_tokens=16,
                                                    stream=True):  # fmt: skip
            if chunk.choices and chunk.choices[0].delta.content and index not in first_token:
                first_token[index] = time.monotonic()
            if chunk.choices:
                finish = chunk.choices[0].finish_reason or finish
        finished[index] = finish

    def arrived() -> int:
        """Requests the gateway has taken in: answered (asked first, so that a request answered between the two
        questions is counted in neither, never twice), running or waiting in the engine's queue."""
        answered = len(service.client.requests(100))
        model = service.model()
        return answered + int(model["running_requests"]) + int(model["waiting_requests"])

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
    for index, thread in enumerate(threads):
        thread.start()
        wait_for(lambda n=index: arrived() > n, 60, f"request {index} in the queue")  # a known arrival order
    for thread in threads:
        thread.join(timeout=180)
    assert sorted(finished) == list(range(8))
    assert all(finish in ("stop", "length") for finish in finished.values()), finished
    assert sorted(first_token, key=first_token.__getitem__) == list(range(8))


def test_full_queue_answers_429_with_retry_after(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--max-queue", "1")
    try:
        headers = {"Authorization": f"Bearer {service.api_key}"}
        body = {"model": BUNDLED_ID, "prompt": "A story:", "max_tokens": 200}
        with httpx.Client(timeout=120) as http:
            results: list[int] = []
            threads = [
                threading.Thread(
                    target=lambda: results.append(
                        http.post(f"{service.url}/completions", json=body, headers=headers).status_code
                    )
                )
                for _ in range(2)
            ]
            for thread in threads:
                thread.start()
            wait_for(lambda: service.model()["waiting_requests"] == 1, 30, "one waiting request")
            refused = http.post(f"{service.url}/completions", json=body, headers=headers)
            for thread in threads:
                thread.join()
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert results == [200, 200]
    finally:
        stop_service_process(service)


def test_two_models_alternate_under_a_memory_cap_and_idle_ttl(
    paths: AppPaths, tmp_path: Path, bundled_gguf: Path
) -> None:
    paths.models_dir.mkdir(parents=True)
    (paths.models_dir / "second.gguf").write_bytes(bundled_gguf.read_bytes())
    # The cap counts the planner's predicted peak of each engine's default plan, its prompt cache included: room for
    # one model at a time.
    info = read_gguf_info(bundled_gguf)
    peak = (
        llama_cpp_memory(facts_from_gguf(info), DEFAULT_CONTEXT).ram + default_plan(BUNDLED_ID, info).prompt_cache_bytes
    )
    cap = str(peak * 3 // 2)
    service = start_service_process(paths, tmp_path, "--max-memory", cap, "--idle-ttl", "3")
    try:
        client = service.openai_client()
        for model in (BUNDLED_ID, "second", BUNDLED_ID, "second"):
            assert client.completions.create(model=model, prompt="Hi", max_tokens=2).choices[0].text is not None
            other = "second" if model == BUNDLED_ID else BUNDLED_ID
            assert service.model(model)["state"] == "ready"
            assert service.model(other)["state"] == "stopped"
        assert "make room for second" in str(service.model()["message"])
        wait_for(lambda: service.model("second")["state"] == "stopped", 20, "the second model stopped")
        assert "idle" in str(service.model("second")["message"])
    finally:
        stop_service_process(service)


def test_a_model_ttl_overrides_the_default(paths: AppPaths, tmp_path: Path, bundled_gguf: Path) -> None:
    paths.models_dir.mkdir(parents=True)
    for name in ("second", "third"):
        (paths.models_dir / f"{name}.gguf").write_bytes(bundled_gguf.read_bytes())
    service = start_service_process(
        paths, tmp_path, "--idle-ttl", "600", "--model-ttl", "second=2", "--model-ttl", "third=never"
    )
    try:
        ttls = {m["id"]: m["idle_ttl_s"] for m in service.client.models()}
        assert ttls == {BUNDLED_ID: 600, "second": 2, "third": None}
        client = service.openai_client()
        for model in ("second", BUNDLED_ID):
            assert client.completions.create(model=model, prompt="Hi", max_tokens=2).choices
        wait_for(lambda: service.model("second")["state"] == "stopped", 20, "the second model stopped")
        assert "idle (TTL 2 s)" in str(service.model("second")["message"])
        assert service.model()["state"] == "ready"
    finally:
        stop_service_process(service)


def test_requests_are_measured_and_logged(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    try:
        client = service.openai_client()
        for _ in range(2):
            list(client.chat.completions.create(model=BUNDLED_ID, messages=SECRET_MESSAGES, max_tokens=8,
                                                stream=True))  # fmt: skip
        reply = client.completions.create(model=BUNDLED_ID, prompt=SECRET_PROMPT, max_tokens=12, temperature=0)
        auth = {"Authorization": f"Bearer {service.client.address.token}"}
        control = service.client.address.control_url
        metrics = httpx.get(f"{control}/api/metrics?window=600", headers=auth, timeout=10).json()
        summary = metrics["models"][BUNDLED_ID]
        assert summary["requests"] == 3 and summary["errors"] == 0
        assert summary["ttft_p50_s"] > 0 and summary["completion_tokens"] >= 3
        prometheus = httpx.get(f"{control}/metrics", headers=auth, timeout=10).text
        assert f'modeldeck_requests_total{{model="{BUNDLED_ID}",status="200"}} 3' in prometheus
        assert "modeldeck_ttft_seconds" in prometheus
    finally:
        stop_service_process(service)
    with sqlite3.connect(paths.requests_db) as database:
        rows = database.execute("SELECT status, stream, ttft_s, completion_tokens FROM requests").fetchall()
    assert len(rows) == 3
    streamed = [row for row in rows if row[1]]
    assert len(streamed) == 2 and all(row[2] > 0 and row[3] > 0 for row in streamed)
    stored = b"".join(path.read_bytes() for path in paths.requests_db.parent.glob(paths.requests_db.name + "*"))
    answer = reply.choices[0].text.strip()
    assert len(answer) > 8, answer
    for text in (SECRET_PROMPT, SECRET_MESSAGES[0]["content"], answer):
        assert text.encode() not in stored  # no prompt or completion text unless the user asks for it


def test_request_text_is_logged_when_turned_on(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--log-request-text")
    try:
        client = service.openai_client()
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(model=BUNDLED_ID, messages=SECRET_MESSAGES, max_tokens=12,
                                                        stream=True, stream_options={"include_usage": True})
            if chunk.choices
        )  # fmt: skip
        reply = client.completions.create(model=BUNDLED_ID, prompt=SECRET_PROMPT, max_tokens=12)
    finally:
        stop_service_process(service)
    with sqlite3.connect(paths.requests_db) as database:
        rows = database.execute("SELECT route, prompt_text, completion_text FROM requests ORDER BY time").fetchall()
    assert [row[0] for row in rows] == ["/v1/chat/completions", "/v1/completions"]
    assert json.loads(rows[0][1]) == SECRET_MESSAGES and rows[0][2] == streamed and streamed.strip()
    assert json.loads(rows[1][1]) == SECRET_PROMPT and rows[1][2] == reply.choices[0].text


def test_keys_stay_off_command_lines_and_out_of_logs(service: RunningService, paths: AppPaths) -> None:
    service.openai_client().completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=2)
    engine = psutil.Process(int(service.model()["pid"]))
    internal_key = engine.environ()["API_KEY"]
    assert len(internal_key) > 30 and internal_key != service.api_key
    for process in (engine, psutil.Process(service.process.pid)):
        command_line = " ".join(process.cmdline())
        assert internal_key not in command_line and service.api_key not in command_line
    logs = [*paths.logs.rglob("*.log"), service.log_path]
    assert any(path.name == f"{BUNDLED_ID}.log" for path in logs)
    for path in logs:
        text = path.read_text(errors="replace")
        assert internal_key not in text and service.api_key not in text, path


def test_a_model_predicted_over_the_memory_cap_is_refused(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--max-memory", "200M")
    try:
        service.client.start_model(BUNDLED_ID, wait=True)
        state = service.model()
        # the default plan's predicted peak is about 500 MiB: well over 200 MiB, although the file is 94 MiB
        assert state["state"] == "failed"
        assert "needs about" in str(state["message"]) and "cap of 200 MiB" in str(state["message"])
    finally:
        stop_service_process(service)
