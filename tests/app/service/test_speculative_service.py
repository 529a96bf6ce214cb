"""Speculative decoding against the real service on the bundled model: on llama-server with the bundled model as
its own draft (the one model here with the same vocabulary), and prompt-lookup decoding on llama-cpp-python. At
temperature 0 each answers what the model answers without it; llama-server reports how many drafted tokens it
accepted, in the answer's timings and as the engine's `draft_acceptance` series. A draft with another vocabulary
(a copy of the bundled model with one token changed) is refused with a sentence before anything starts.

The answers are asked with no repeat penalty: llama-cpp-python's prompt lookup applies its default penalty (1.1)
over the tokens it drafts as well, which changes its answers (found here: "3. 4" where the model says "3. 3"). Even
without one, it checks drafted tokens in a batch, whose float rounding differs from one token at a time: where two
tokens are nearly equally likely it may pick the other ("over the lazy dog" for "over lazy dog", seen in
tests/bench/speculative.py), so only the start of its answer is held to the model's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from app.client import ControlError
from app.hub.library import BUNDLED_ID
from tests.support.other_vocabulary import copy_with_other_vocabulary
from tests.support.service import RunningService, StartService
from tests.support.waiting import wait_for

PROMPT = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
TOKENS = 40


def answer(service: RunningService, model: str = BUNDLED_ID) -> tuple[str, dict[str, Any]]:
    reply = service.openai_client().chat.completions.create(
        model=model,
        messages=PROMPT,
        max_tokens=TOKENS,
        temperature=0,
        extra_body={"repeat_penalty": 1.0},
    )
    text = reply.choices[0].message.content
    assert text
    return text, (reply.model_extra or {}).get("timings") or {}


def restart(service: RunningService, overrides: dict[str, int | str]) -> dict[str, Any]:
    service.client.stop_model(BUNDLED_ID)
    started = service.client.start_model(BUNDLED_ID, wait=True, overrides=overrides)
    assert started["state"] == "ready", service.client.logs(BUNDLED_ID)
    return dict(started)


def test_a_draft_model_on_llama_server(llama_server_service: StartService, bundled_gguf: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    copy_with_other_vocabulary(bundled_gguf, models / "other-vocabulary.gguf")
    shutil.copy(bundled_gguf, models / "same-vocabulary.gguf")
    service = llama_server_service("--models-dir", str(models))
    service.start_on_llama_server(1)
    plain, _ = answer(service)

    estimate = service.client.estimate_model_settings(BUNDLED_ID, {"engine": "llama-server", "draft": BUNDLED_ID})
    assert estimate["plan"]["draft"] == BUNDLED_ID and estimate["drafts"] == []  # same-vocabulary is not smaller
    assert estimate["draft_reason"] is not None and "same vocabulary, +" in estimate["draft_reason"]
    without = service.client.estimate_model_settings(BUNDLED_ID, {"engine": "llama-server"})
    assert estimate["memory"]["total_bytes"] > without["memory"]["total_bytes"]  # the draft's memory is counted

    started = restart(service, {"engine": "llama-server", "parallel": 1, "draft": BUNDLED_ID})
    assert started["plan"]["draft"] == BUNDLED_ID
    drafted, timings = answer(service)
    assert drafted == plain  # the model checks every drafted token: at temperature 0 the answer is its own
    assert timings["draft_n"] > 0 and 0 < timings["draft_n_accepted"] <= timings["draft_n"]

    def acceptance() -> float | None:
        found = service.client.series(60, ["engine_draft_acceptance"], BUNDLED_ID)["series"]
        values = [value for series in found for value in series["v"]]
        return values[-1] if values else None

    rate = wait_for(acceptance, 30, "the engine's draft acceptance series")
    assert 0 < rate <= 1

    with pytest.raises(ControlError) as refused:
        service.client.start_model(BUNDLED_ID, overrides={"engine": "llama-server", "draft": "other-vocabulary"})
    assert "other-vocabulary cannot draft for smollm2-135m-instruct: their vocabularies differ" in str(refused.value)
    with pytest.raises(ControlError, match='`draft` needs `engine` "llama-server"'):
        service.client.start_model(BUNDLED_ID, overrides={"engine": "llama-cpp-python", "draft": BUNDLED_ID})


def test_prompt_lookup_on_llama_cpp_python(service: RunningService) -> None:
    plain, _ = answer(service)
    started = restart(service, {"engine": "llama-cpp-python", "lookup": 4})
    assert started["plan"]["lookup"] == 4 and "--draft_model" in service.model(BUNDLED_ID)["launch"]["argv"]
    looked_up, _ = answer(service)
    assert looked_up[:12] == plain[:12] and len(looked_up) > 12
