"""Hostile requests against a real service process: each gets a clear 4xx (or a 503 that says what to do without
internals), the service logs no traceback, and it keeps serving."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from app.service.control.control import api_routes
from tests.support.service import REPO, RunningService, free_port, start_service_process, stop_service_process

DEEP = b"[" * 100_000 + b"]" * 100_000  # json.loads raises RecursionError on it
NESTED_65 = b'{"model": "m", "prompt": "x", "user": ' + b"[" * 65 + b"]" * 65 + b"}"


@pytest.fixture
def idle_service(paths: AppPaths, tmp_path: Path) -> Iterator[RunningService]:
    """The service with no engine started: every request here is refused before one would be."""
    service = start_service_process(paths, tmp_path)
    yield service
    stop_service_process(service)


def gateway(service: RunningService) -> httpx.Client:
    return httpx.Client(
        base_url=service.url.removesuffix("/v1"), headers={"Authorization": f"Bearer {service.api_key}"},
        timeout=30, trust_env=False,
    )  # fmt: skip


def control(service: RunningService) -> httpx.Client:
    address = service.client.address
    headers = {"Authorization": f"Bearer {address.token}"}
    return httpx.Client(base_url=address.control_url, headers=headers, timeout=30, trust_env=False)


def test_deeply_nested_json_is_a_400_everywhere(idle_service: RunningService) -> None:
    service = idle_service
    with gateway(service) as v1, control(service) as api:
        for route in ("/v1/chat/completions", "/v1/completions", "/v1/embeddings"):
            for body in (DEEP, NESTED_65):
                answer = v1.post(route, content=body, headers={"Content-Type": "application/json"})
                assert answer.status_code == 400, (route, answer.text)
                error = answer.json()["error"]
                assert error["type"] == "invalid_request_error" and "not valid JSON" in error["message"]
        for method, path, body in [
            ("POST", f"/api/models/{BUNDLED_ID}/start", DEEP[:4000]),
            ("POST", "/api/remotes", DEEP[:16_000]),
            ("PUT", "/api/settings", DEEP[:16_000]),
            ("POST", "/api/downloads", DEEP[:16_000]),
            ("POST", "/api/bench", DEEP[:4000]),
        ]:
            answer = api.request(method, path, content=body)
            assert answer.status_code == 400, (path, answer.status_code, answer.text)
        assert v1.get("/v1/models").status_code == 200
    assert service.client.health()["status"] == "ok"
    assert "Traceback" not in service.output() and "RecursionError" not in service.output()


def test_remote_image_urls_are_refused_and_inline_images_pass_the_check(idle_service: RunningService) -> None:
    """An engine with a vision model fetches image URLs itself: a client could reach the user's network."""
    service = idle_service
    client = service.openai_client()
    for url in ("http://169.254.169.254/latest/meta-data/", "file:///etc/passwd", "HTTPS://intranet/x.png"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="absent", messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}},
            ]}])  # fmt: skip
        assert refused.value.body["param"] == "messages[0].content[1].image_url.url"  # type: ignore[index]
        assert "`messages[0].content[1].image_url.url` must be a data: URL" in refused.value.message
    with pytest.raises(openai.NotFoundError):  # past the checks, to the unknown model
        client.chat.completions.create(model="absent", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]}])  # fmt: skip


def test_a_model_that_cannot_start_answers_503_without_paths_or_logs(paths: AppPaths, tmp_path: Path) -> None:
    paths.models_dir.mkdir(parents=True)
    broken = paths.models_dir / "broken-model.gguf"
    broken.write_bytes(b"GGUF" + bytes(100))
    service = start_service_process(paths, tmp_path, "--model", "broken-model")
    try:
        with pytest.raises(openai.APIStatusError) as error:
            service.openai_client().completions.create(model="broken-model", prompt="x", max_tokens=2)
        assert error.value.status_code == 503
        message = error.value.message
        assert "could not be started" in message and "/api/models/broken-model/logs" in message
        assert str(paths.models_dir) not in message and "GGUF version" not in message
        # the reason stays where the user looks for it
        model = service.model("broken-model")
        assert str(broken) in model["message"] and "unsupported GGUF version" in model["message"]
    finally:
        stop_service_process(service)


def test_cors_origin_null_is_refused_on_the_command_line(paths: AppPaths) -> None:
    """`null` is the origin of sandboxed frames and file: pages: allowing it allows any page."""
    for origin in ("null", "*", "http://localhost:3000/path"):
        result = subprocess.run(
            [sys.executable, "-m", "app", "serve", "--port", str(free_port()), "--cors-origin", origin],
            capture_output=True, text=True, timeout=60, cwd=REPO, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        assert f"argument --cors-origin: {origin!r} is not an origin" in result.stderr
        assert not paths.service_file.exists()


def test_prometheus_labels_are_escaped(paths: AppPaths, tmp_path: Path) -> None:
    """A model id with a quote and a line feed (ids come from file names and remote servers' lists) must not
    forge a series in GET /metrics."""
    with socket.socket() as closed:  # a port nothing listens on: the request fails upstream, and is counted
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    evil = 'evil"} 1\nmodeldeck_forged 1\n#'
    service = start_service_process(paths, tmp_path, "--upstream", f"{evil}=http://127.0.0.1:{port}")
    try:
        with pytest.raises(openai.APIStatusError):
            service.openai_client().completions.create(model=evil, prompt="x", max_tokens=2)
        with control(service) as api:
            text = api.get("/metrics").text
        assert not any(line.startswith("modeldeck_forged") for line in text.splitlines())
        escaped = 'model="evil\\"} 1\\nmodeldeck_forged 1\\n#"'
        assert f"modeldeck_requests_total{{{escaped},status=" in text
    finally:
        stop_service_process(service)


def test_a_lone_surrogate_in_a_control_body_is_a_400_naming_the_field(idle_service: RunningService) -> None:
    """Each route's body is read in one place, which refuses half a surrogate pair (a `\\ud800` escape) before the
    route sees it: no setting, remote name or path holds text that cannot be written as UTF-8."""
    with control(idle_service) as api:
        for method, path, body, param in [
            ("PUT", "/api/settings", {"models_dir": "/tmp/\ud800"}, "models_dir"),
            ("POST", "/api/remotes", {"name": "r", "url": "http://127.0.0.1:9/v1", "api_key": "\udfff"}, "api_key"),
            ("POST", "/api/library/import", {"path": "/tmp/\ud800.gguf"}, "path"),
            ("PUT", f"/api/models/{BUNDLED_ID}/settings", {"engine": "\udc00"}, "engine"),
            ("POST", "/api/bench", {"model": BUNDLED_ID, "prompt_mode": ["ok", "\ud800"]}, "prompt_mode[1]"),
            ("POST", "/api/quality", {"model": "\ud800"}, "model"),
        ]:
            answer = api.request(method, path, content=json.dumps(body).encode())
            assert answer.status_code == 400, (path, answer.text)
            error = answer.json()["error"]
            assert (error["type"], error["param"]) == ("invalid_request_error", param), (path, answer.text)
            assert "lone UTF-16 surrogate" in error["message"], answer.text
    assert "Traceback" not in idle_service.output()


def test_a_path_too_long_to_look_at_is_a_400_naming_the_field(idle_service: RunningService) -> None:
    """A quality run's `data` file named with 300 characters made `is_file` raise ENAMETOOLONG: a 500. As the
    import's path and the models folder setting, it is a 400 that says what is wrong with the path."""
    too_long = "/" + "a" * 300 + ".txt"
    with control(idle_service) as api:
        for method, path, body, param in [
            ("POST", "/api/quality", {"model": BUNDLED_ID, "data": too_long}, "data"),
            ("PUT", "/api/settings", {"models_dir": too_long}, "models_dir"),
            ("PUT", "/api/settings", {"models_dir": "/" + "a" * 5000}, "models_dir"),
        ]:
            answer = api.request(method, path, json=body)
            assert answer.status_code == 400, (path, answer.text)
            error = answer.json()["error"]
            assert error["param"] == param and len(error["message"]) < 600, answer.text
    assert "Traceback" not in idle_service.output()


def test_a_malformed_download_name_is_a_400(idle_service: RunningService) -> None:
    """The name is wrong before any Hub is asked: not a 502, which says the Hub failed."""
    with control(idle_service) as api:
        for body, words in [
            ({"repo": "x"}, "Expected organization/name[:QUANT] or organization/name/FILE, got 'x'"),
            ({"repo": "org/name", "variant": "Q4_0", "file": "a.gguf"}, "Give a quantization (REPO:QUANT) or a file"),
        ]:
            answer = api.post("/api/downloads", json=body)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert (error["type"], error["code"]) == ("invalid_request_error", "bad_name")
            assert error["message"].startswith(words), error["message"]


def test_a_wrong_method_is_a_405_that_says_which_methods_the_route_takes(idle_service: RunningService) -> None:
    """RFC 9110: a known path with a method it does not take is a 405 with `Allow`, and HEAD is GET without a body."""
    with control(idle_service) as api, gateway(idle_service) as v1:
        for client, method, path, allow in [
            (api, "PUT", "/api/health", "GET, HEAD"),
            (api, "POST", "/api/models", "GET, HEAD"),
            (api, "GET", f"/api/models/{BUNDLED_ID}/start", "POST"),
            (api, "PATCH", "/api/settings", "GET, HEAD, PUT"),
            (api, "GET", "/api/hf-token", "PUT, DELETE"),
            (v1, "PUT", "/v1/models", "GET, HEAD"),
            (v1, "GET", "/v1/chat/completions", "POST"),
        ]:
            answer = client.request(method, path)
            assert (answer.status_code, answer.headers.get("allow")) == (405, allow), (method, path, answer.text)
            assert answer.json()["error"]["message"] == f"Method {method} not allowed on {path}; it takes {allow}."
        for client, path in [(api, "/api/health"), (api, f"/api/models/{BUNDLED_ID}/settings"), (v1, "/v1/models")]:
            answer = client.head(path)
            assert (answer.status_code, answer.content) == (200, b""), path
            assert answer.headers["content-type"] == "application/json"
        # The event stream's head ends its answer: the connection serves the next request at once.
        events = api.head("/api/events")
        assert (events.status_code, events.headers["content-type"]) == (200, "text/event-stream")
        assert api.get("/api/health", timeout=10).status_code == 200
        unknown = api.put("/api/nothing")
        assert (unknown.status_code, unknown.json()["error"]["message"]) == (404, "Unknown route PUT /api/nothing.")
    assert "Traceback" not in idle_service.output()


NOT_TRIED = {
    ("POST", "/api/shutdown"),  # it would stop the service
    ("GET", "/api/hub/search"), ("GET", "/api/hub/models/{...}"),  # they ask the Hub
}  # fmt: skip


def test_every_route_the_table_lists_reaches_its_handler(idle_service: RunningService) -> None:
    """The route table is the gate before routing: a route it lists that no handler answers would be a 404 that
    says the route is unknown. Placeholder ids and a body that is no object keep every request harmless."""
    with control(idle_service) as api:
        for method, pattern in api_routes():
            if (method, pattern) in NOT_TRIED:
                continue
            path = pattern.replace("{...}", "x/y").replace("{}", "x")
            if path == "/api/events":  # a stream: its head only
                method = "HEAD"
            answer = api.request(method, path, content=b"[]")
            assert answer.status_code not in (405, 500, 502, 503) and "Unknown route" not in answer.text, (method, path)
