"""Conversations taking turns on the real llama-server (the pinned build, bundled model, 4 slots) through the real
service and the official `openai` client: each conversation's turns land on its own slot, the engine reports the
earlier turns as cached, and the reuse figure reaches /api/metrics and the series."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys
from typing import Any

import httpx
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import REPO, RunningService, StartService
from tests.support.waiting import wait_for

PARALLEL = 4
CONVERSATIONS = 3
TURNS = 3
WORDS = (
    "river", "stone", "lantern", "orchard", "copper", "meadow", "harbor", "signal", "quiet", "thunder", "violet",
    "marble", "canyon", "ember", "glacier", "willow", "compass", "falcon", "velvet", "prism", "anchor", "summit",
)  # fmt: skip


def system_prompt(conversation: int) -> str:
    """About 150 words, different for each conversation from the first word on."""
    words = random.Random(conversation).choices(WORDS, k=150)
    return f"{conversation}. You keep these notes in mind: " + " ".join(words)


def metrics(service: RunningService) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {service.client.address.token}"}
    answer = httpx.get(f"{service.client.address.control_url}/api/metrics?window=600", headers=auth, timeout=10)
    result: dict[str, Any] = answer.json()
    return result


def test_conversations_keep_their_slots_and_their_cached_prefix(llama_server_service: StartService) -> None:
    service = llama_server_service()
    service.start_on_llama_server(PARALLEL)
    client = service.openai_client()
    histories = [[{"role": "system", "content": system_prompt(n)}] for n in range(CONVERSATIONS)]
    for turn in range(TURNS):
        for n, history in enumerate(histories):
            history.append({"role": "user", "content": f"Question {turn}: which note comes after {WORDS[n]}?"})
            asked: dict[str, Any] = {"model": BUNDLED_ID, "messages": history, "max_tokens": 12, "temperature": 0}
            if n == 0:  # streamed, without usage: the cache figures come from the stream's last event
                stream = client.chat.completions.create(**asked, stream=True)
                text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            else:
                text = client.chat.completions.create(**asked).choices[0].message.content or ""
            history.append({"role": "assistant", "content": text})

    records = service.client.requests(limit=100)
    assert len(records) == CONVERSATIONS * TURNS and all(r["status"] == 200 for r in records), records
    turns_of = [records[n::CONVERSATIONS] for n in range(CONVERSATIONS)]  # sent one at a time, in this order
    slots = [{r["slot"] for r in turns} for turns in turns_of]
    assert all(len(s) == 1 and None not in s for s in slots), slots  # every turn on its conversation's slot
    assert len(set().union(*slots)) == CONVERSATIONS, slots  # each conversation on a slot of its own
    for turns in turns_of:
        first = turns[0]
        assert first["prompt_tokens"] > 150 and first["prompt_cached_tokens"] < first["prompt_tokens"] // 4
        for earlier, later in itertools.pairwise(turns):
            # The slot still held the whole earlier prompt: the engine computed only the new messages.
            assert later["prompt_cached_tokens"] >= earlier["prompt_tokens"] - 1, (earlier, later)
            assert later["prompt_tokens"] > later["prompt_cached_tokens"]

    cached = sum(r["prompt_cached_tokens"] for r in records)
    prompt = sum(r["prompt_tokens"] for r in records)
    summary = metrics(service)["models"][BUNDLED_ID]
    assert summary["prompt_cached_tokens"] == cached
    assert summary["prompt_cache_reuse"] == pytest.approx(cached / prompt)
    assert 0.3 < summary["prompt_cache_reuse"] < 1.0  # turns 2 and 3 of three conversations mostly cached

    def reuse_series() -> list[float]:
        found = service.client.series(120, names=["prompt_cache_reuse"], model=BUNDLED_ID)["series"]
        return list(found[0]["v"]) if found else []

    assert wait_for(lambda: [v for v in reuse_series() if v > 0], 15, "the prompt_cache_reuse series")
    assert all(0.0 <= v <= 1.0 for v in reuse_series())


def test_slot_routing_off_leaves_the_choice_to_llama_server_and_still_measures_the_cache(
    llama_server_service: StartService,
) -> None:
    service = llama_server_service("--slot-routing", "off")
    service.start_on_llama_server(PARALLEL)
    client = service.openai_client()
    messages = [{"role": "system", "content": system_prompt(7)}, {"role": "user", "content": "Hello."}]
    for _ in range(2):
        client.chat.completions.create(model=BUNDLED_ID, messages=messages, max_tokens=4, temperature=0)
    records = service.client.requests(limit=10)
    assert [r["slot"] for r in records] == [None, None]  # no id_slot sent
    # The same prompt twice: llama-server's own choice finds it in a slot.
    assert records[1]["prompt_cached_tokens"] >= records[0]["prompt_tokens"] - 1


def test_a_wrong_slot_routing_value_is_refused_clearly(paths: AppPaths) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "serve", "--slot-routing", "maybe"], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert "--slot-routing: expected on or off, got 'maybe'" in done.stderr
