"""The manager's and the gateway's orchestration, in this process, through the official `openai` client: engines
started on demand, queues, cancellation, the idle TTL, eviction under a memory cap, capacity.

The engines are tests/bench/synthetic_engine.py processes under the real supervisor (tests/support/synthetic.py
says why): what is tested here is the orchestration, which does not depend on the model's compute, and the
synthetic engine makes it fast and independent of the llama-server build."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import openai
import pytest

from app.paths import AppPaths
from app.service.engines import EngineManager
from app.service.events import EventBus
from app.service.launch.lifecycle import IDLE_CHECK_MIN_S, LifecyclePolicy
from engines.base import Capabilities
from engines.states import EngineState
from tests.support.synthetic import Core, SyntheticEngineAdapter, running_core, synthetic_spec
from tests.support.waiting import wait_until

ONE_AT_A_TIME = Capabilities(max_concurrency=1, stream_usage=True)
MESSAGES: list[Any] = [{"role": "user", "content": "Hi"}]


def slow_engines(capabilities: Capabilities = ONE_AT_A_TIME) -> dict[str, SyntheticEngineAdapter]:
    """An engine pacing tokens 20 ms apart: a 200-token answer takes seconds, long enough to be seen running
    (the tests wait for states, never for time)."""
    return {"synthetic": SyntheticEngineAdapter(capabilities, token_delay_ms=20)}


async def first_chunk(core: Core, model: str, max_tokens: int = 200) -> openai.AsyncStream[Any]:
    """A streamed chat whose first chunk has arrived: it is being served now."""
    stream = await core.openai.chat.completions.create(
        model=model, messages=MESSAGES, max_tokens=max_tokens, stream=True
    )
    await stream.__anext__()
    return stream


async def drain(stream: openai.AsyncStream[Any]) -> str:
    return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


async def test_a_request_starts_its_engine_and_is_streamed_through(paths: AppPaths, tmp_path: Path) -> None:
    engines = {"synthetic": SyntheticEngineAdapter(ONE_AT_A_TIME)}
    async with running_core(paths, [synthetic_spec(tmp_path, "m")], engines) as core:
        assert core.manager.state("m") == EngineState.STOPPED
        stream = await core.openai.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=5, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert len(text.split()) == 5
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
        assert core.manager.state("m") == EngineState.READY
        await wait_until(lambda: len(core.records()) == 1, "the request is recorded")
        record = core.records()[0]
        assert record["model"] == "m" and record["status"] == 200 and record["completion_tokens"] == 5


async def test_requests_beyond_capacity_wait_their_turn(paths: AppPaths, tmp_path: Path) -> None:
    async with running_core(paths, [synthetic_spec(tmp_path, "m")], slow_engines()) as core:
        first = await first_chunk(core, "m", max_tokens=30)
        waiting = [asyncio.create_task(core.openai.completions.create(model="m", prompt="x", max_tokens=3))
                   for _ in range(2)]  # fmt: skip
        await wait_until(lambda: core.manager.queue_depths()["m"] == (1, 2), "one running, two waiting")
        assert core.manager.describe("m")["waiting_requests"] == 2
        await drain(first)
        answers = await asyncio.gather(*waiting)
        assert [len((a.choices[0].text or "").split()) for a in answers] == [3, 3]
        await wait_until(lambda: core.manager.queue_depths()["m"] == (0, 0), "the queue is empty")
        await wait_until(lambda: len(core.records()) == 3, "three requests recorded")
        queued = sorted(record["queued_s"] for record in core.records())
        assert queued[0] == 0 and queued[-1] > 0  # the first went straight through; the last waited


async def test_a_full_queue_answers_429_with_retry_after(paths: AppPaths, tmp_path: Path) -> None:
    lifecycle = LifecyclePolicy(max_waiting=1)
    async with running_core(paths, [synthetic_spec(tmp_path, "m")], slow_engines(), lifecycle) as core:
        first = await first_chunk(core, "m")
        waiting = asyncio.create_task(core.openai.completions.create(model="m", prompt="x", max_tokens=1))
        await wait_until(lambda: core.manager.queue_depths()["m"] == (1, 1), "one running, one waiting")
        with pytest.raises(openai.RateLimitError) as refused:
            await core.openai.completions.create(model="m", prompt="x", max_tokens=1)
        assert refused.value.code == "queue_full" and int(refused.value.response.headers["retry-after"]) >= 1
        await first.close()
        await waiting


async def test_a_client_that_leaves_frees_its_place_and_its_slot(paths: AppPaths, tmp_path: Path) -> None:
    async with running_core(paths, [synthetic_spec(tmp_path, "m")], slow_engines()) as core:
        running = await first_chunk(core, "m", max_tokens=4000)
        waiting = asyncio.create_task(core.openai.completions.create(model="m", prompt="x", max_tokens=1))
        await wait_until(lambda: core.manager.queue_depths()["m"] == (1, 1), "one running, one waiting")
        waiting.cancel()  # the client leaves while its request waits
        await wait_until(lambda: core.manager.queue_depths()["m"] == (1, 0), "the waiting request is gone")
        await running.close()  # and while its answer streams
        await wait_until(lambda: core.manager.queue_depths()["m"] == (0, 0), "the running request is gone")
        await wait_until(lambda: len(core.records()) == 2, "both requests recorded")
        assert {record["status"] for record in core.records()} == {499}
        # The engine's slot is free again: the next request is served at once.
        answer = await core.openai.completions.create(model="m", prompt="x", max_tokens=2)
        assert len((answer.choices[0].text or "").split()) == 2


async def test_an_idle_engine_is_stopped_after_its_ttl(paths: AppPaths, tmp_path: Path) -> None:
    lifecycle = LifecyclePolicy(idle_ttl_s=0.5, model_ttl_s={"kept": None})
    specs = [synthetic_spec(tmp_path, "m"), synthetic_spec(tmp_path, "kept")]
    engines = {"synthetic": SyntheticEngineAdapter(ONE_AT_A_TIME)}
    async with running_core(paths, specs, engines, lifecycle) as core:
        for model in ("m", "kept"):
            await core.openai.completions.create(model=model, prompt="x", max_tokens=1)
        await wait_until(lambda: core.manager.state("m") == EngineState.STOPPED, "the idle engine stopped", 30)
        assert "idle (TTL 0.5 s)" in core.manager.describe("m")["message"]
        assert core.manager.state("kept") == EngineState.READY  # no TTL of its own: never stopped
        answer = await core.openai.completions.create(model="m", prompt="x", max_tokens=1)  # starts it again
        assert answer.choices and core.manager.state("m") in (EngineState.READY, EngineState.STOPPED)


async def test_a_ttl_that_is_not_positive_keeps_engines_loaded(paths: AppPaths) -> None:
    """0 is "never" in the window's settings; a negative TTL, from wherever it came, is no TTL either: the idle
    check ends at once rather than spinning without a pause and stopping every engine."""
    lifecycle = LifecyclePolicy(idle_ttl_s=0, model_ttl_s={"a": -1.0, "b": math.nan})
    assert lifecycle.shortest_ttl() is None and {lifecycle.ttl_for(m) for m in ("a", "b", "c")} == {None}
    manager = EngineManager({}, paths, EventBus(), lifecycle=lifecycle)
    await asyncio.wait_for(manager.stop_idle_engines(), timeout=5)


async def test_the_idle_check_pauses_however_short_the_ttl(paths: AppPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []

    class Paused(Exception):
        pass

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        raise Paused

    manager = EngineManager({}, paths, EventBus(), lifecycle=LifecyclePolicy(idle_ttl_s=1e-9))
    monkeypatch.setattr(asyncio, "sleep", sleep)
    with pytest.raises(Paused):
        await manager.stop_idle_engines()
    monkeypatch.undo()
    assert pauses == [IDLE_CHECK_MIN_S]


async def test_an_idle_engine_makes_room_and_a_busy_one_does_not(paths: AppPaths, tmp_path: Path) -> None:
    """Under a cap that holds one model, a request for another stops the least recently used idle engine; with
    that engine busy, the request is refused with the reason and nothing is stopped."""
    mib = 1 << 20
    specs = [synthetic_spec(tmp_path, name, 600 * mib) for name in ("a", "b")]
    lifecycle = LifecyclePolicy(max_loaded_bytes=1000 * mib)
    async with running_core(paths, specs, slow_engines(), lifecycle) as core:
        await core.openai.completions.create(model="a", prompt="x", max_tokens=1)
        await core.openai.completions.create(model="b", prompt="x", max_tokens=1)
        assert core.manager.state("a") == EngineState.STOPPED and core.manager.state("b") == EngineState.READY
        assert "make room for b" in core.manager.describe("a")["message"]
        busy = await first_chunk(core, "b")
        with pytest.raises(openai.InternalServerError) as refused:
            await core.openai.completions.create(model="a", prompt="x", max_tokens=1)
        assert refused.value.status_code == 503 and refused.value.code == "model_unavailable"
        assert core.manager.state("b") == EngineState.READY
        assert "does not fit under the memory cap" in core.manager.describe("a")["message"]
        await busy.close()


async def test_an_engine_serving_several_requests_gets_them_at_once(paths: AppPaths, tmp_path: Path) -> None:
    four = Capabilities(max_concurrency=4, stream_usage=True)
    async with running_core(paths, [synthetic_spec(tmp_path, "m")], slow_engines(four)) as core:
        # Four streams are served at once: each has its first chunk while none has ended.
        streams = await asyncio.gather(*(first_chunk(core, "m", max_tokens=4000) for _ in range(4)))
        assert core.manager.describe("m")["max_concurrent_requests"] == 4
        fifth = asyncio.create_task(core.openai.completions.create(model="m", prompt="x", max_tokens=1))
        await wait_until(lambda: core.manager.queue_depths()["m"] == (4, 1), "four running, the fifth waiting")
        await streams[0].close()
        assert len((await fifth).choices) == 1  # it got the place the first left
        for stream in streams[1:]:
            await stream.close()
