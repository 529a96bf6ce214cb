"""The control API's shared request helpers (app.service.http.api): JSON bodies, query numbers and refusals, first
driven with ASGI messages as a server sends them, then through a real service process, route by route."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from app.bounded_json import MAX_DEPTH
from app.paths import AppPaths
from app.service.http.api import ApiError, parse_query, query_text, query_whole, read_json_object, read_limited
from app.service.http.asgi import ClientGone, Message, Receive
from tests.support.service import RunningService, start_service_process, stop_service_process


def receive_of(*chunks: bytes, disconnect: bool = False) -> Receive:
    """What an ASGI server hands the app for a body sent in `chunks` (or a client gone before the end)."""
    messages: list[Message] = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1 or disconnect}
        for i, chunk in enumerate(chunks)
    ]
    if disconnect:
        messages.append({"type": "http.disconnect"})

    async def receive() -> Message:
        return messages.pop(0)

    return receive


async def refusal(receive: Receive, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as refused:
        await read_json_object(receive, **kwargs)
    return refused.value


async def test_a_json_object_is_read_and_an_empty_body_is_an_empty_object() -> None:
    assert await read_json_object(receive_of(b'{"a": ', b"[1, 2]}")) == {"a": [1, 2]}
    assert await read_json_object(receive_of(b"")) == {}


async def test_each_bad_body_is_refused_with_its_own_status_and_message() -> None:
    over = await refusal(receive_of(b"{", b"x" * 40), limit=32)
    assert (over.status, str(over)) == (413, "The body is over 32 bytes.")
    assert (await refusal(receive_of(b"x" * 40), limit=32, too_large_status=400)).status == 400
    for body in (b"{'a': 1}", b"\xff\xfe{}", b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)):
        bad = await refusal(receive_of(body))
        assert (bad.status, str(bad)) == (400, "The body is not JSON."), body
    not_object = await refusal(receive_of(b"[1]"))
    assert (not_object.status, str(not_object)) == (400, "The body must be a JSON object.")
    assert not_object.body() == {
        "error": {"message": "The body must be a JSON object.", "type": "invalid_request_error", "param": None,
                  "code": None},
    }  # fmt: skip


async def test_a_client_gone_mid_body_is_not_a_refusal() -> None:
    with pytest.raises(ClientGone):
        await read_limited(receive_of(b"{", disconnect=True), 100)


def test_a_refusal_carries_its_code_param_and_extra_fields() -> None:
    error = ApiError(409, "Needs a confirmation.", "confirmation_required", "bind_address", lan={"port": 1})
    assert error.body() == {
        "error": {"message": "Needs a confirmation.", "type": "invalid_request_error", "param": "bind_address",
                  "code": "confirmation_required"},
        "lan": {"port": 1},
    }  # fmt: skip


def test_query_values_and_whole_numbers() -> None:
    query = parse_query({"query_string": b"limit=5&limit=9&q=&n=007"})
    assert query_text(query, "limit") == "5" and query_text(query, "z", "d") == "d"
    assert query_text(query, "q", "x") == "x"  # a blank value counts as none, as parse_qs has always read it
    assert query_whole(query, "limit", 1, 0, 10, "no") == 5
    assert query_whole(query, "n", 1, 0, None, "no") == 7
    assert query_whole(query, "absent", 42, 0, None, "no") == 42
    for text in ("-1", "1.5", " 5", "", "²", "١٢", "11", "0"):
        bad = parse_query({"query_string": urlencode({"limit": text}).encode()}) if text else {"limit": [""]}
        with pytest.raises(ApiError) as refused:
            query_whole(bad, "limit", 1, 1, 10, "`limit` must be a whole number from 1 to 10.")
        assert (refused.value.status, refused.value.param) == (400, "limit"), text
        assert str(refused.value) == "`limit` must be a whole number from 1 to 10."


@pytest.fixture
def bare_service(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """A real service with no model: the control API's refusals need no engine."""
    running = start_service_process(paths, tmp_path)
    yield running
    stop_service_process(running)


def test_every_route_module_refuses_bad_input_the_same_way(bare_service: RunningService) -> None:
    address = bare_service.client.address
    headers = {"Authorization": f"Bearer {address.token}"}
    with httpx.Client(base_url=address.control_url, headers=headers, trust_env=False, timeout=30) as http:

        def error(method: str, path: str, status: int, **kwargs: Any) -> dict[str, Any]:
            answer = http.request(method, path, **kwargs)
            assert answer.status_code == status, (method, path, answer.text)
            body: dict[str, Any] = answer.json()["error"]
            return body

        # Query numbers (control.py, hub_routes.py): a digit that is not ASCII was a 500 before the shared helper.
        assert error("GET", "/api/requests", 400, params={"limit": "²"})["message"] == "`limit` must be a whole number."
        assert error("GET", "/api/series", 400, params={"window": "0"})["param"] == "window"
        assert error("GET", "/api/metrics", 400, params={"window": "-5"})["param"] == "window"
        assert error("GET", "/api/hub/search", 400, params={"limit": "0"})["message"].startswith("`limit` must be")
        assert http.get("/api/requests", params={"limit": "3"}).json() == []
        # JSON bodies: settings (413 over the limit), Hub (400 over the limit, as it always answered), remotes (its
        # own message), a start and a benchmark (the small limit).
        big = b'{"x": "' + b"y" * 20_000 + b'"}'
        assert error("PUT", "/api/settings", 413, content=big)["message"] == "The body is over 16384 bytes."
        assert error("PUT", "/api/settings", 400, content=b"[1]")["message"] == "The body must be a JSON object."
        assert error("POST", "/api/downloads", 400, content=big)["message"] == "The body is over 16384 bytes."
        assert error("POST", "/api/library/import", 400, content=b"{nope")["message"] == "The body is not JSON."
        expected = 'Expected a JSON object {"name", "url", "api_key"}.'
        assert error("POST", "/api/remotes", 400, content=big)["message"] == expected
        assert error("POST", "/api/bench", 413, content=big)["message"] == "The body is over 4096 bytes."
        bad_setting = error("PUT", "/api/settings", 400, json={"gateway_port": "x"})
        assert bad_setting["code"] == "invalid_setting" and bad_setting["param"] == "gateway_port"
    assert bare_service.client.health()["status"] == "ok"
