"""The OpenAI field table: the docs are generated from it, and validation reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.service.gateway.openai_fields import CHAT, EMBEDDINGS, REGENERATE, TABLE, check_request, markdown, normalise
from app.service.gateway.tool_calls import plan_tools
from app.service.gateway.validation import InvalidRequest

DOCS = Path(__file__).parents[4] / "docs" / "OPENAI_FIELDS.md"
ASK = [{"role": "user", "content": "Hi"}]


def test_the_committed_docs_are_the_table() -> None:
    assert DOCS.read_text() == markdown(), f"docs/OPENAI_FIELDS.md is stale: run `{REGENERATE}`"


def test_every_field_is_documented_once_per_route() -> None:
    for route, fields in TABLE.items():
        names = [field.name for field in fields]
        assert len(names) == len(set(names)), route
        assert all(field.fate == "honoured" or field.note for field in fields), route


def test_ignored_fields_are_accepted_and_dropped() -> None:
    body = {"model": "m", "messages": ASK, "store": False, "metadata": {"a": "b"}, "service_tier": "auto",
            "user": "u", "reasoning_effort": "low", "modalities": ["text"]}  # fmt: skip
    check_request(CHAT, body, lambda model: None)
    assert normalise(CHAT, body)
    assert body == {"model": "m", "messages": ASK}


def test_legacy_functions_become_tools() -> None:
    function = {"name": "f", "parameters": {"type": "object"}}
    body = {"model": "m", "messages": ASK, "functions": [function], "function_call": {"name": "f"}}
    check_request(CHAT, body, lambda model: None)
    plan = plan_tools("llama-cpp-python", None, body)
    assert plan is not None and plan.legacy and plan.mode == "forced"
    assert "functions" not in body and "function_call" not in body
    assert body["response_format"]["json_schema"]["schema"]["properties"]["arguments"] == {"type": "object"}


@pytest.mark.parametrize(
    ("route", "field", "value", "why"),
    [(CHAT, "store", True, "stores none"), (CHAT, "audio", {"voice": "x"}, "audio"),
     (CHAT, "modalities", ["text", "audio"], "no audio"), (CHAT, "web_search_options", {}, "web search"),
     (EMBEDDINGS, "dimensions", 8, "truncate")],
)  # fmt: skip
def test_refused_fields_name_themselves_and_say_why(route: str, field: str, value: object, why: str) -> None:
    body = {"model": "m", "input": "x"} if route == EMBEDDINGS else {"model": "m", "messages": ASK}
    with pytest.raises(InvalidRequest, match=why) as refused:
        check_request(route, {**body, field: value}, lambda model: None)
    assert refused.value.param == field


def test_fields_outside_the_reference_stay_unknown() -> None:
    with pytest.raises(InvalidRequest, match="Unknown field `temprature`"):
        check_request(CHAT, {"model": "m", "messages": ASK, "temprature": 1}, lambda model: None)


@pytest.mark.parametrize("given", ["hello", ["a", "b"], [9906, 1917], [[9906, 1917], [42]]])
def test_embeddings_take_text_or_token_ids(given: object) -> None:
    check_request(EMBEDDINGS, {"model": "m", "input": given}, lambda model: None)


@pytest.mark.parametrize("given", ["", [], [[]], [-1], [1.5], [True], [[1], ["a"]], ["a", [1]], [2**31], ["a"] * 2049])
def test_embeddings_refuse_other_inputs_naming_the_field(given: object) -> None:
    with pytest.raises(InvalidRequest, match="token ids") as refused:
        check_request(EMBEDDINGS, {"model": "m", "input": given}, lambda model: None)
    assert refused.value.param == "input"
