"""Parts of the Responses dialect that the real service cannot be made to show on demand: an error in the middle of
the core's stream (`response.failed`), a store that fails, the store's retention and its handling of a file that is
no database; and any body read or refused with a 400 naming a field (hypothesis)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from app.service.dialects.response_store import ResponseStore, StoredResponse
from app.service.dialects.responses import ResponsesDialect
from app.service.dialects.responses_request import ResponsesRequest, read_request
from app.service.gateway.validation import InvalidRequest
from app.service.http.asgi import Message, Receive, Scope, Send

_SSE = [(b"content-type", b"text/event-stream")]


async def _core_failing_mid_stream(scope: Scope, receive: Receive, send: Send) -> None:
    """The chat core as it answers when the engine fails after its first words."""
    await receive()
    chunk = {"choices": [{"index": 0, "delta": {"content": "Once"}, "finish_reason": None}]}
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
    await send({"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(), "more_body": True})
    error = {"error": {"message": "The engine stopped answering.", "type": "server_error"}}
    await send({"type": "http.response.body", "body": f"data: {json.dumps(error)}\n\n".encode()})


async def _core_answering(scope: Scope, receive: Receive, send: Send) -> None:
    """The chat core answering a whole completion."""
    await receive()
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1}}  # fmt: skip
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": json.dumps(answer).encode()})


async def _core_ending_early(scope: Scope, receive: Receive, send: Send) -> None:
    """The chat core's stream ending with no finish reason, as when the client has gone."""
    await receive()
    chunk = {"choices": [{"index": 0, "delta": {"content": "Once"}, "finish_reason": None}]}
    await send({"type": "http.response.start", "status": 200, "headers": _SSE})
    await send({"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode()})


async def _serve(
    dialect: ResponsesDialect, body: dict[str, Any], method: str = "POST", path: str = "/v1/responses"
) -> tuple[int, bytes]:
    scope: Scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
                    "query_string": b"", "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    incoming = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    gone = asyncio.Event()

    async def receive() -> Message:
        if incoming:
            return incoming.pop()
        await gone.wait()
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await dialect(scope, receive, send)
    gone.set()
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


def test_an_error_mid_stream_fails_the_response(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "responses.sqlite")
    dialect = ResponsesDialect(_core_failing_mid_stream, store, 1 << 20)
    status, body = asyncio.run(_serve(dialect, {"model": "m", "input": "Tell me a story.", "stream": True}))
    assert status == 200
    events = [json.loads(line[6:]) for line in body.decode().split("\n") if line.startswith("data: ")]
    kinds = [event["type"] for event in events]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta", "response.failed"]  # fmt: skip
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["message"] == "The engine stopped answering."
    assert failed["output"][0]["type"] == "message"
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    assert asyncio.run(store.get(failed["id"])) is None  # a failed response is not kept to continue from
    store.close()


def _events(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.decode().split("\n") if line.startswith("data: ")]


def test_a_stream_cut_short_fails_and_is_not_kept(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "responses.sqlite")
    dialect = ResponsesDialect(_core_ending_early, store, 1 << 20)
    status, body = asyncio.run(_serve(dialect, {"model": "m", "input": "Hi", "stream": True}))
    events = _events(body)
    assert status == 200 and events[-1]["type"] == "response.failed", events
    assert asyncio.run(store.get(events[-1]["response"]["id"])) is None
    store.close()


def test_a_store_that_fails_costs_retrieval_not_answers(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = ResponseStore(tmp_path)  # a folder: SQLite cannot open it
    dialect = ResponsesDialect(_core_answering, store, 1 << 20)
    status, body = asyncio.run(_serve(dialect, {"model": "m", "input": "Hi"}))
    assert status == 200 and json.loads(body)["output"][0]["content"][0]["text"] == "Hi"
    assert "could not store response" in caplog.text
    status, body = asyncio.run(_serve(dialect, {}, "GET", "/v1/responses/resp_1"))
    assert status == 500 and json.loads(body)["error"]["code"] == "store_failed"
    store.close()


def _stored(response_id: str, created_at: float) -> StoredResponse:
    return StoredResponse(response_id, created_at, {"id": response_id}, [{"role": "user", "content": "Hi"}])


def test_store_keeps_deletes_and_forgets_after_retention(tmp_path: Path) -> None:
    database = tmp_path / "responses.sqlite"

    async def use() -> None:
        store = ResponseStore(database, retention_s=3600)
        await store.put(_stored("resp_old", time.time() - 7200))
        await store.put(_stored("resp_new", time.time()))
        assert await store.get("resp_old") is None  # past the retention: never answered, pruned at the next open
        kept = await store.get("resp_new")
        assert kept is not None and kept.messages == [{"role": "user", "content": "Hi"}]
        assert await store.delete("resp_new") and not await store.delete("resp_new")
        assert await store.get("resp_new") is None
        store.close()
        reopened = ResponseStore(database, retention_s=3600)
        assert await reopened.get("resp_missing") is None
        reopened.close()

    asyncio.run(use())
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT count(*) FROM responses").fetchone() == (0,)


def test_store_sets_aside_a_file_that_is_no_database(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    database = tmp_path / "responses.sqlite"
    database.write_bytes(b"not a database at all" * 100)

    async def use() -> None:
        store = ResponseStore(database)
        await store.put(_stored("resp_1", time.time()))
        assert await store.get("resp_1") is not None
        store.close()

    asyncio.run(use())
    assert "not a database" in caplog.text
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("responses.sqlite.")]


# Hypothesis keeps caches in ./.hypothesis, which pytest (with this project's norecursedirs) then refuses to collect.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "modeldeck-hypothesis")
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_FIELDS = st.sampled_from(
    ["model", "input", "instructions", "tools", "tool_choice", "text", "metadata", "max_output_tokens",
     "temperature", "previous_response_id", "reasoning", "include"]
)  # fmt: skip
_ITEM_FIELDS = {name: _JSON for name in ("role", "content", "call_id", "name", "arguments", "output")}
_ITEM = st.fixed_dictionaries(
    {"type": st.sampled_from(["message", "function_call", "function_call_output", "input_text"])},
    optional={**_ITEM_FIELDS, "role": st.sampled_from(["user", "assistant", "tool"]) | _JSON},
)


def _read(body: dict[str, Any]) -> ResponsesRequest | InvalidRequest:
    try:
        return read_request(body)
    except InvalidRequest as refused:
        return refused


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.dictionaries(_FIELDS, _JSON, max_size=6),
    st.lists(_ITEM | _JSON, max_size=4),
    st.lists(st.fixed_dictionaries({"type": st.just("function")}, optional={"name": _JSON, "parameters": _JSON})),
)
def test_any_body_is_read_or_refused_naming_a_field(body: dict[str, Any], items: list[Any], tools: list[Any]) -> None:
    """Nothing but InvalidRequest escapes the reading of a body (a 400 naming the field), whatever its values."""
    for candidate in (body, {**body, "input": items}, {**body, "model": "m", "input": items, "tools": tools}):
        read = _read(candidate)
        if isinstance(read, InvalidRequest):
            assert str(read).startswith("`") and read.param, read
        else:
            assert read.chat["model"] == candidate["model"] and isinstance(read.input, list)
