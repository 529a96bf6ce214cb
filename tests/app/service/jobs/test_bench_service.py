"""Benchmarks run by the service for its clients (the GUI's Benchmark page), on the real service and bundled model:
a sweep through the control API with progress events and a complete card, cancel, one run at a time, bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.client import ControlClient, ControlError
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.events import EventRecorder
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

RUN_TIMEOUT_S = 600.0  # a busy 2-core machine decodes the bundled model at 0.5-2 tokens/s
OUTPUT_TOKENS = 8


def wait_for_run(client: ControlClient, done: Any, timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run: dict[str, Any] = client.bench()["run"]
        if done(run):
            return run
        time.sleep(0.2)
    raise AssertionError(f"the benchmark did not get there in {timeout_s:.0f} s: {client.bench()['run']}")


@pytest.fixture
def events(service: RunningService) -> Iterator[EventRecorder]:
    recorder = EventRecorder(service.client, "bench")
    assert recorder.opened.wait(30), "the event stream did not open"  # before the run starts
    yield recorder
    recorder.close()


def bench_children(service: RunningService) -> list[psutil.Process]:
    return [
        child for child in psutil.Process(service.process.pid).children(recursive=True) if "bench" in child.cmdline()
    ]


def test_a_sweep_through_the_api_saves_a_complete_card(
    service: RunningService, events: EventRecorder, paths: AppPaths
) -> None:
    client = service.client
    assert client.bench() == {"run": None, "cards": []}
    run = client.start_bench(BUNDLED_ID, [1, 2], prompt_tokens=64, output_tokens=OUTPUT_TOKENS, requests=3)
    assert run["state"] == "running" and run["model"] == BUNDLED_ID and run["concurrency"] == [1, 2]
    assert run["prompt_mode"] == "unique" and run["seed"] == 0  # distinct prompts unless asked otherwise
    # The load runs in a child process of the service, never in the service's interpreter.
    assert len(bench_children(service)) == 1
    run = wait_for_run(client, lambda r: r["state"] != "running")
    assert run["state"] == "completed", run
    assert run["fraction"] == 1.0 and run["requests_per_level"] == [3, 3]
    assert [level["concurrency"] for level in run["levels"]] == [1, 2]
    assert run["levels"][0]["gain"] == 1.0 and run["levels"][1]["gain"] > 0

    card = client.bench_card(run["card_id"])
    assert card["model"]["id"] == BUNDLED_ID and card["model"]["quantization"] == "Q4_1"
    assert card["engine"]["name"] == "llama-cpp-python" and card["parameters"]["output_tokens"] == OUTPUT_TOKENS
    assert card["parameters"]["prompt_tokens"] == 64 and card["parameters"]["requests_per_level"] == [3, 3]
    launch = card["engine"]["launch"]["argv"]  # the engine's own command line (its server module or cached script)
    assert card["parameters"]["prompt_mode"] == "unique" and launch[launch.index("--model_alias") + 1] == BUNDLED_ID
    assert len(card["hardware"]["id"]) == 16
    for level, shown in zip(card["results"], run["levels"], strict=True):
        assert level == shown  # the run's table is the card's
        assert level["errors"] == 0 and level["completed"] == 3
        assert 0 < level["output_tokens"] <= 3 * OUTPUT_TOKENS
        assert 0 < level["ttft_p50_s"] <= level["ttft_p99_s"] and 0 < level["itl_p50_s"] <= level["itl_p99_s"]
    assert (paths.bench_dir / f"{run['card_id']}.md").is_file()
    listed = client.bench()["cards"]
    assert [c["id"] for c in listed] == [run["card_id"]]
    assert listed[0]["concurrency"] == [1, 2] and listed[0]["errors"] == 0
    assert listed[0]["prompt_mode"] == "unique" and listed[0]["best_prompt_tokens_per_s"] > 0
    assert listed[0]["best_output_tokens_per_s"] == max(level["output_tokens_per_s"] for level in card["results"])

    # Progress came live: requests of each level counted up, then every level, then the card.
    wait_for(lambda: events.values("run") and events.values("run")[-1]["state"] == "completed", 30,
             "the completed run's event")  # fmt: skip
    states = events.values("run")
    assert states[0]["state"] == "running" and states[-1]["state"] == "completed"
    assert any(s["phase"] == "warmup" for s in states)
    assert any(s["phase"] == "level" and 0 < s["fraction"] < 1 for s in states)
    assert [len(s["levels"]) for s in states] == sorted(len(s["levels"]) for s in states)
    assert not bench_children(service)

    # A second card, and the two side by side.
    second = client.start_bench(BUNDLED_ID, [1], prompt_tokens=56, output_tokens=4, requests=2)
    second = wait_for_run(client, lambda r: r["id"] == second["id"] and r["state"] != "running")
    assert second["state"] == "completed", second
    rows = {row[0]: row[1:] for row in client.compare_bench_cards(run["card_id"], second["card_id"])}
    assert rows["card"] == [run["card_id"], second["card_id"]]
    assert rows["c=2 TTFT p99 ms"][1] == "-"  # the second card has no level 2
    assert [c["id"] for c in client.bench()["cards"]] == [second["card_id"], run["card_id"]]


def test_cancel_stops_the_run_and_frees_the_engine(service: RunningService, paths: AppPaths) -> None:
    client = service.client
    run = client.start_bench(BUNDLED_ID, [1, 2], prompt_tokens=64, output_tokens=200, requests=6)
    # One run at a time.
    with pytest.raises(ControlError) as second:
        client.start_bench(BUNDLED_ID, [1], prompt_tokens=56, output_tokens=4)
    assert second.value.status == 409 and "already running" in str(second.value)

    wait_for_run(client, lambda r: r["phase"] == "level")
    started = time.monotonic()
    cancelled = client.cancel_bench()
    assert time.monotonic() - started < 10
    assert cancelled["id"] == run["id"] and cancelled["state"] == "cancelled" and cancelled["finished"]
    assert not bench_children(service)
    assert client.bench()["run"]["state"] == "cancelled"
    assert not paths.bench_dir.exists() or not list(paths.bench_dir.iterdir())  # no card for a cut sweep
    with pytest.raises(ControlError) as again:
        client.cancel_bench()
    assert again.value.status == 409

    # The engine serves the next request at once: the cancelled sweep's requests were cut upstream.
    started = time.monotonic()
    reply = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert reply.choices[0].message.content is not None
    assert time.monotonic() - started < 10


BAD_REQUESTS: list[tuple[Any, int, str]] = [
    ({"model": "no-such-model", "concurrency": [1]}, 404, "Unknown model 'no-such-model'"),
    ({"concurrency": [1]}, 400, "`model` is required"),
    ({"model": BUNDLED_ID, "concurrency": [0, 2]}, 400, "from 1 to 4096"),
    ({"model": BUNDLED_ID, "concurrency": []}, 400, "from 1 to 4096"),
    ({"model": BUNDLED_ID, "concurrency": "1,x"}, 400, "from 1 to 4096"),
    ({"model": BUNDLED_ID, "concurrency": [1.5]}, 400, "list of whole numbers"),
    ({"model": BUNDLED_ID, "prompt_tokens": -3}, 400, "`prompt_tokens` must be a whole number"),
    ({"model": BUNDLED_ID, "output_tokens": "8"}, 400, "`output_tokens` must be a whole number"),
    ({"model": BUNDLED_ID, "output_tokens": 10**9}, 400, "from 1 to 8192"),
    ({"model": BUNDLED_ID, "requests": True}, 400, "`requests` must be a whole number"),
    ({"model": BUNDLED_ID, "temperature": 1}, 400, "Unknown field 'temperature'"),
    ({"model": BUNDLED_ID, "prompt_mode": "random"}, 400, "`prompt_mode` must be one of unique, shared-prefix"),
    ({"model": BUNDLED_ID, "prompt_mode": "shared-prefix"}, 400, "Shared-prefix needs a prefix of 1 to 255 tokens"),
    (
        {"model": BUNDLED_ID, "prompt_mode": "shared-prefix", "prompt_tokens": 64, "prefix_tokens": 64},
        400,
        "Shared-prefix needs a prefix of 1 to 63 tokens",
    ),
    ({"model": BUNDLED_ID, "prompt_mode": "multi-turn", "turns": 1}, 400, "`turns` must be a whole number from 2"),
    ({"model": BUNDLED_ID, "prompt_mode": "multi-turn", "requests": 4}, 400, "conversations x turns requests"),
    ({"model": BUNDLED_ID, "conversations": 0}, 400, "`conversations` must be a whole number from 1"),
    ({"model": BUNDLED_ID, "seed": -1}, 400, "`seed` must be a whole number from 0"),
    ({"model": BUNDLED_ID, "prefix_tokens": "8"}, 400, "`prefix_tokens` must be a whole number"),
    ([BUNDLED_ID], 400, "JSON object"),
]


def test_bad_benchmark_requests_get_a_clear_error(service: RunningService) -> None:
    client = service.client
    for body, status, words in BAD_REQUESTS:
        with pytest.raises(ControlError) as refused:
            client._call("POST", "/api/bench", json=body)
        assert refused.value.status == status and words in str(refused.value), body
    assert client.bench()["run"] is None and not bench_children(service)  # nothing started
    assert client.health()["status"] == "ok"


def test_bad_card_references_get_a_clear_error(service: RunningService, paths: AppPaths) -> None:
    client = service.client
    with pytest.raises(ControlError) as raw:
        client._call("POST", "/api/bench", content=b"{not json", headers={"content-type": "application/json"})
    assert raw.value.status == 400 and "must be JSON" in str(raw.value)
    with pytest.raises(ControlError) as missing:
        client.bench_card("20260101-000000-nothing")
    assert missing.value.status == 404 and "No benchmark card" in str(missing.value)
    (paths.data / "secret.json").write_text("{}")
    with pytest.raises(ControlError) as outside:
        client._call("GET", "/api/bench/cards/..%2Fsecret")  # a hostile request, not our client
    assert outside.value.status in (400, 404) and "secret" not in client.bench()["cards"]
    with pytest.raises(ControlError) as half:
        client._call("GET", "/api/bench/compare", params={"a": "x"})
    assert half.value.status == 400 and "`a` and `b`" in str(half.value)
    paths.bench_dir.mkdir(parents=True)
    (paths.bench_dir / "broken.json").write_text("{")
    assert client.bench()["cards"] == []  # an unreadable card is skipped, the list still answers
    with pytest.raises(ControlError) as broken:
        client.bench_card("broken")
    assert broken.value.status == 400 and "cannot be read" in str(broken.value)


def test_stopping_the_service_stops_its_benchmark(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    try:
        service.client.start_bench(BUNDLED_ID, [1], prompt_tokens=64, output_tokens=500, requests=20)
        wait_for_run(service.client, lambda r: r["phase"] == "level")
        children = bench_children(service)
        assert len(children) == 1
    finally:
        stop_service_process(service)
    assert service.process.returncode == 0, service.output()
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive
    assert "benchmark bench-1 cancelled" in service.output()
