"""Launch parameters from a request body: shape, types and bounds, and how they change a plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.service.launch.overrides import BadOverrides, PlanOverrides, plan_summary
from engines.base import LaunchPlan

PLAN = LaunchPlan("m", Path("/models/m.gguf"), context_length=4096, threads=2, batch_size=512, gpu_layers=0)


def test_an_empty_body_keeps_the_default_plan() -> None:
    assert PlanOverrides.from_json(b"", cores=4) is None
    assert PlanOverrides.from_json(b"  \n", cores=4) is None
    empty = PlanOverrides.from_json(b"{}", cores=4)
    assert empty is not None
    assert empty.apply(PLAN, 8192) == PLAN


def test_overrides_replace_only_what_they_name() -> None:
    overrides = PlanOverrides.from_json(b'{"context": 1024, "batch": 256, "gpu_layers": null}', cores=4)
    assert overrides == PlanOverrides(context=1024, batch=256)
    plan = overrides.apply(PLAN, 8192)
    assert plan_summary(plan) == {
        "context": 1024, "gpu_layers": 0, "threads": 2, "batch": 256, "parallel": 1, "draft": None, "lookup": 0
    }  # fmt: skip
    assert plan.model_path == PLAN.model_path


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        (b"[1, 2]", None, "JSON object"),
        (b"{not json", None, "JSON object"),
        (b'{"n_ctx": 1024}', "n_ctx", "Unknown launch parameter"),
        (b'{"context": "1024"}', "context", "whole number"),
        (b'{"context": 1024.5}', "context", "whole number"),
        (b'{"threads": true}', "threads", "whole number"),
        (b'{"context": 255}', "context", "at least 256"),
        (b'{"threads": 0}', "threads", "from 1 to 4"),
        (b'{"threads": 5}', "threads", "from 1 to 4"),
        (b'{"batch": 31}', "batch", "from 32 to 4096"),
        (b'{"batch": 4097}', "batch", "from 32 to 4096"),
        (b'{"gpu_layers": -1}', "gpu_layers", "from 0 to 1000"),
        (b'{"gpu_layers": 1001}', "gpu_layers", "from 0 to 1000"),
        (b'{"engine": "vllm"}', "engine", "one of llama-cpp-python, llama-server"),
        (b'{"engine": 3}', "engine", "one of llama-cpp-python, llama-server"),
        (b'{"engine": "llama-server", "parallel": 0}', "parallel", "from 1 to 64"),
        (b'{"engine": "llama-server", "parallel": 65}', "parallel", "from 1 to 64"),
        (b'{"parallel": 4}', "parallel", 'needs `engine` "llama-server"'),
    ],
)
def test_malformed_or_out_of_bounds_values_are_refused(body: bytes, param: str | None, words: str) -> None:
    with pytest.raises(BadOverrides) as refused:
        PlanOverrides.from_json(body, cores=4)
    assert refused.value.param == param
    assert words in str(refused.value)


def test_the_context_is_bounded_by_what_the_model_was_trained_on() -> None:
    overrides = PlanOverrides(context=8193)
    with pytest.raises(BadOverrides, match="8192 tokens the model was trained on"):
        overrides.apply(PLAN, 8192)
    assert PlanOverrides(context=8192).apply(PLAN, 8192).context_length == 8192
    assert PlanOverrides(context=100_000).apply(PLAN, None).context_length == 100_000  # unknown: no bound to check


def test_llama_server_gets_slots_by_default_or_as_asked() -> None:
    """Naming llama-server without `parallel` gives its own default of 4 slots; `parallel` sets them."""
    named = PlanOverrides.from_json(b'{"engine": "llama-server"}', cores=4)
    assert named is not None and named.apply(PLAN, 8192).parallel == 4
    asked = PlanOverrides.from_json(b'{"engine": "llama-server", "parallel": 16}', cores=4)
    assert asked is not None and asked.apply(PLAN, 8192).parallel == 16
    assert PlanOverrides(context=1024).apply(PLAN, 8192).parallel == 1


def test_llama_server_slots_may_share_a_trained_context_each() -> None:
    """llama-server's slots share `-c` and each uses at most the trained context: up to that much per slot."""
    four = PlanOverrides(context=4 * 8192, engine="llama-server")
    assert four.apply(PLAN, 8192).context_length == 4 * 8192
    with pytest.raises(BadOverrides, match="more than 2 slots of the 8192 tokens") as refused:
        PlanOverrides(context=4 * 8192, engine="llama-server", parallel=2).apply(PLAN, 8192)
    assert refused.value.param == "context"
    with pytest.raises(BadOverrides, match="8192 tokens the model was trained on"):
        PlanOverrides(context=8193, engine="llama-cpp-python").apply(PLAN, 8192)
    assert four.slots("llama-server") == 4 and PlanOverrides().slots("llama-cpp-python") == 1
