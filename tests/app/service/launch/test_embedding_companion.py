"""/v1/embeddings for a model served by llama-server, whose chat process cannot embed (`--embeddings` turns chat
off): the service starts a second llama-server of the same file in embedding mode on demand. Real llama-server
(built by installers/test.sh), bundled model, real service process, official `openai` client."""

from __future__ import annotations

import base64
import math
import os
import signal
import struct
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.planner.defaults import default_plan
from app.planner.facts import facts_from_gguf
from app.planner.memory import llama_cpp_memory, plan_memory
from app.service.launch.companions import companion_plan
from engines.gguf import read_gguf_info
from tests.support.service import StartService
from tests.support.waiting import wait_for

TEXTS = ["The sea is calm tonight.", "Quarterly tax forms are due in April.", "The sea is calm tonight."]


def norm(vector: list[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in vector))


def close(a: list[float], b: list[float], tolerance: float = 1e-4) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b, strict=True))


def test_embeddings_come_from_a_companion_that_lives_and_dies_with_the_model(
    llama_server_service: StartService, bundled_gguf: Path
) -> None:
    width = facts_from_gguf(read_gguf_info(bundled_gguf)).embedding_length
    service = llama_server_service()
    started = service.start_on_llama_server(2)
    assert started["embedding_companion"] is None  # started on the first embeddings request, not before
    client = service.openai_client()

    one = client.embeddings.create(model=BUNDLED_ID, input=TEXTS[0], encoding_format="float")
    assert len(one.data) == 1 and len(one.data[0].embedding) == width
    several = client.embeddings.create(model=BUNDLED_ID, input=TEXTS, encoding_format="float")
    vectors = [item.embedding for item in several.data]
    assert [item.index for item in several.data] == [0, 1, 2] and all(len(v) == width for v in vectors)
    assert all(math.isclose(norm(v), 1.0, rel_tol=1e-3) for v in vectors)  # pooled and normalized, as OpenAI's
    assert close(vectors[0], one.data[0].embedding) and close(vectors[0], vectors[2])
    assert not close(vectors[0], vectors[1], 1e-2)
    assert several.usage.prompt_tokens > 0 and several.model == BUNDLED_ID and several.object == "list"

    # base64: little-endian float32, the same numbers; the client's default asks for it and decodes it itself.
    encoded = client.embeddings.create(model=BUNDLED_ID, input=TEXTS, encoding_format="base64")
    raw = [base64.b64decode(item.embedding) for item in encoded.data]
    decoded = [list(struct.unpack(f"<{len(r) // 4}f", r)) for r in raw]
    assert all(close(d, v, 1e-6) for d, v in zip(decoded, vectors, strict=True))
    default = client.embeddings.create(model=BUNDLED_ID, input=TEXTS[1])
    assert close(default.data[0].embedding, vectors[1], 1e-6)

    state = service.model()
    companion = state["embedding_companion"]
    assert companion["state"] == "ready" and companion["footprint_bytes"] > 0 and companion["rss_bytes"] > 0
    assert companion["pid"] not in (None, state["pid"]) and companion["port"] != state["port"]
    assert psutil.Process(companion["pid"]).name().startswith("llama-server")

    # Chat on the same model while embeddings are being made: both are served.
    results: dict[str, Any] = {}

    def chat() -> None:
        messages = [{"role": "user", "content": "Tell me about the sea."}]
        reply = client.chat.completions.create(model=BUNDLED_ID, max_tokens=24, messages=messages)
        results["chat"] = reply.choices[0].message.content

    def embed() -> None:
        results["embeddings"] = [len(client.embeddings.create(model=BUNDLED_ID, input=TEXTS).data)
                                 for _ in range(3)]  # fmt: skip

    threads = [threading.Thread(target=chat), threading.Thread(target=embed)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results.get("chat") and results.get("embeddings") == [3, 3, 3], (results, service.output())

    # The companion killed: the next request is either served by its restart or refused cleanly, and once
    # it is back the same text gives the same vector.
    os.kill(companion["pid"], signal.SIGKILL)
    refusal = None
    try:
        client.embeddings.create(model=BUNDLED_ID, input=TEXTS[0], encoding_format="float")
    except openai.APIStatusError as refused:
        refusal = refused
    if refusal is not None:
        assert refusal.status_code in (502, 503) and "engine" in refusal.message.lower(), refusal.message
    back = wait_for(lambda: (c := service.model()["embedding_companion"]) and c["state"] == "ready"
                    and c["restarts"] == 1 and c, 60, "the companion's restart")  # fmt: skip
    assert back["pid"] != companion["pid"]
    again = client.embeddings.create(model=BUNDLED_ID, input=TEXTS[0], encoding_format="float")
    assert close(again.data[0].embedding, vectors[0])

    # Stopping the model stops its companion: no process left.
    service.client.stop_model(BUNDLED_ID)
    stopped = service.model()
    assert stopped["state"] == "stopped" and stopped["embedding_companion"] is None
    assert not psutil.pid_exists(back["pid"]) or psutil.Process(back["pid"]).status() == psutil.STATUS_ZOMBIE


def test_the_companion_counts_under_the_memory_cap(
    llama_server_service: StartService, paths: AppPaths, bundled_gguf: Path
) -> None:
    """Two models fit under the cap, not two and a companion: starting the companion stops the idle other model.
    The cap is set from the service's own predictions (no calibration yet when the models start: the second model
    runs on llama-cpp-python, named since llama-server is the default here, whose measurements do not correct
    llama-server's; its prompt cache counts)."""
    paths.models_dir.mkdir(parents=True)
    (paths.models_dir / "second.gguf").write_bytes(bundled_gguf.read_bytes())
    info = read_gguf_info(bundled_gguf)
    facts, plan = facts_from_gguf(info), default_plan(BUNDLED_ID, info)
    model_peak = llama_cpp_memory(facts, plan.context_length, batch=plan.batch_size).ram
    # the bundled model runs on llama-server, which has a memory model of its own
    server_peak = plan_memory("llama-server", facts, replace(plan, parallel=1)).ram
    companion = companion_plan(plan)
    companion_peak = llama_cpp_memory(facts, companion.context_length, batch=companion.batch_size).ram
    cap = model_peak + plan.prompt_cache_bytes + server_peak + companion_peak // 2
    service = llama_server_service("--max-memory", str(cap))
    second = service.client.start_model("second", wait=True, overrides={"engine": "llama-cpp-python"})
    assert second["state"] == "ready" and second["engine"] == "llama-cpp-python"
    assert service.start_on_llama_server(1)["plan"]["context"] == plan.context_length
    assert service.model("second")["state"] == "ready"  # two models fit

    result = service.openai_client().embeddings.create(model=BUNDLED_ID, input="hello", encoding_format="float")
    assert len(result.data[0].embedding) == facts.embedding_length
    assert service.model()["embedding_companion"]["state"] == "ready"
    second = service.model("second")
    assert second["state"] == "stopped" and f"make room for {BUNDLED_ID}" in second["message"]


def test_a_companion_over_the_memory_cap_is_refused_clearly_and_chat_goes_on(
    llama_server_service: StartService, bundled_gguf: Path
) -> None:
    info = read_gguf_info(bundled_gguf)
    facts, plan = facts_from_gguf(info), default_plan(BUNDLED_ID, info)
    model_peak = llama_cpp_memory(facts, plan.context_length, batch=plan.batch_size).ram
    service = llama_server_service("--max-memory", str(model_peak + (1 << 20)))
    service.start_on_llama_server(1)
    client = service.openai_client()
    with pytest.raises(openai.APIStatusError) as refused:
        client.embeddings.create(model=BUNDLED_ID, input="hello", encoding_format="float")
    assert refused.value.status_code == 503
    assert f"embedding process of `{BUNDLED_ID}` cannot start" in refused.value.message
    assert "with its embedding process needs about" in refused.value.message
    assert service.model()["embedding_companion"] is None and service.model()["state"] == "ready"
    reply = client.chat.completions.create(model=BUNDLED_ID, max_tokens=4,
                                           messages=[{"role": "user", "content": "Hi"}])  # fmt: skip
    assert reply.choices[0].message.content


def test_the_companion_stops_with_the_models_idle_ttl(llama_server_service: StartService) -> None:
    service = llama_server_service("--idle-ttl", "3")
    service.start_on_llama_server(1)
    service.openai_client().embeddings.create(model=BUNDLED_ID, input="hello", encoding_format="float")
    pid = service.model()["embedding_companion"]["pid"]
    assert psutil.pid_exists(pid)
    # The companion stops beside the engine; it is listed (stopping) until its process has exited.
    stopped = wait_for(
        lambda: (m := service.model())["state"] == "stopped" and m["embedding_companion"] is None and m,
        30,
        "the idle stop",
    )
    assert "idle" in stopped["message"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
