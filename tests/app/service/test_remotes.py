"""Remote endpoints: an OpenAI-compatible server elsewhere, routed to by the gateway as `NAME/<its model>`.

The remote is a real second process: llama-cpp-python's server on the bundled model, with its own API key (over
plain HTTP, and over HTTPS with a certificate made for the test). The metrics scrape is checked against a tiny
local HTTP server standing in for vLLM, which cannot run here: it serves the recorded vLLM exposition
(tests/fixtures/metrics/vllm_metrics.txt), lists one model, and records the chat requests it is sent.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.client import ControlError
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import REPO, free_port, start_service_process, stop_service_process
from tests.support.standin_http import StandInHandler, serving

METRICS = Path(__file__).parents[2] / "fixtures" / "metrics" / "vllm_metrics.txt"
REMOTE_KEY = "sk-remote-test"


@dataclass
class RemoteServer:
    process: subprocess.Popen[bytes]
    url: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def start_llama_server(bundled_gguf: Path, tmp_path: Path, tls: tuple[Path, Path] | None = None) -> RemoteServer:
    """llama-cpp-python's OpenAI server on the bundled model, as `smollm`, accepting only REMOTE_KEY."""
    port = free_port()
    scheme = "https" if tls else "http"
    extra = ["--ssl_keyfile", str(tls[0]), "--ssl_certfile", str(tls[1])] if tls else []
    log = (tmp_path / f"remote-{port}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf), "--model_alias", "smollm",
         "--host", "127.0.0.1", "--port", str(port), "--api_key", REMOTE_KEY, "--n_ctx", "1024",
         "--interrupt_requests", "false", *extra],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    log.close()
    server = RemoteServer(process, f"{scheme}://127.0.0.1:{port}")
    deadline = time.monotonic() + 60
    verify = ssl.create_default_context(cafile=str(tls[1])) if tls else True
    try:
        with httpx.Client(verify=verify) as client:
            while time.monotonic() < deadline:
                assert process.poll() is None, (tmp_path / f"remote-{port}.log").read_text()
                headers = {"Authorization": f"Bearer {REMOTE_KEY}"}
                try:
                    if client.get(f"{server.url}/v1/models", headers=headers).is_success:
                        return server
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
        raise AssertionError("the remote llama-cpp-python server did not start")
    except BaseException:
        server.stop()
        raise


@pytest.fixture
def remote(bundled_gguf: Path, tmp_path: Path) -> Iterator[RemoteServer]:
    server = start_llama_server(bundled_gguf, tmp_path)
    yield server
    server.stop()


@dataclass
class StandIn:
    """What the vLLM stand-in saw."""

    chats: list[tuple[dict[str, Any], str | None]] = field(default_factory=list)
    scrapes: list[str | None] = field(default_factory=list)
    generated: int = 3400


@pytest.fixture
def vllm_stand_in() -> Iterator[tuple[str, StandIn]]:
    seen = StandIn()

    class Handler(StandInHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != "Bearer sk-gpu":
                self.send_body(401, b'{"error": "unauthorized"}')
            elif self.path == "/v1/models":
                self.send_json(200, {"object": "list", "data": [{"id": "big", "object": "model"}]})
            elif self.path == "/metrics":
                seen.scrapes.append(self.headers.get("Authorization"))
                seen.generated += 100
                text = METRICS.read_text().replace("} 3400.0", f"}} {seen.generated}.0")
                self.send_body(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self.send_body(404, b"{}")

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.chats.append((body, self.headers.get("Authorization")))
            answer = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                   "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}  # fmt: skip
            self.send_json(200, answer)

    with serving(Handler) as url:
        yield url, seen


def test_a_remote_llama_server_is_served_like_a_local_model(
    remote: RemoteServer, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODELDECK_REMOTE_KEY_UP", REMOTE_KEY)
    service = start_service_process(paths, tmp_path, "--remote", f"up={remote.url}/v1")
    try:
        client = service.openai_client()
        listed = {m.id: m.owned_by for m in client.models.list()}
        assert listed["up/smollm"] == "up" and listed[BUNDLED_ID] == "modeldeck"
        stream = client.chat.completions.create(
            model="up/smollm", messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, stream=True,
            stream_options={"include_usage": True},
        )  # fmt: skip
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        reply = client.completions.create(model="up/smollm", prompt="One, two,", max_tokens=4)
        assert reply.choices[0].text
        records = service.client.requests(10)
        assert {r["model"] for r in records} == {"up/smollm"} and all(r["status"] == 200 for r in records)

        remote.stop()  # the remote goes down: 502 in OpenAI's error shape, the service carries on
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="up/smollm", messages=[{"role": "user", "content": "Hi"}])
        assert failed.value.status_code == 502
        error = failed.value.response.json()["error"]
        assert error["type"] == "server_error" and "remote `up`" in error["message"]
        assert "up/smollm" in {m.id for m in client.models.list()}
        assert REMOTE_KEY not in service.output()
    finally:
        stop_service_process(service)


def test_the_command_line_takes_a_remote_model_by_its_id_with_a_slash(
    remote: RemoteServer, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up/smollm` is one model id in the control API's paths, not the two segments `up` and `smollm`."""
    monkeypatch.setenv("MODELDECK_REMOTE_KEY_UP", REMOTE_KEY)
    service = start_service_process(paths, tmp_path, "--remote", f"up={remote.url}/v1")
    try:
        for args in (["start", "up/smollm"], ["run", "up/smollm", "Say hello.", "--max-tokens", "8"],
                     ["logs", "up/smollm"], ["stop", "up/smollm"]):  # fmt: skip
            done = subprocess.run(
                [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=120, cwd=REPO
            )
            assert done.returncode == 0, (args, done.stderr)
            assert done.stderr == "", args
        assert service.client.requests(10)[0]["model"] == "up/smollm"  # the chat of `run` went to the remote
    finally:
        stop_service_process(service)


def test_remotes_through_the_control_api_with_their_metrics_on_the_dashboard(
    vllm_stand_in: tuple[str, StandIn], paths: AppPaths, tmp_path: Path
) -> None:
    url, seen = vllm_stand_in
    service = start_service_process(paths, tmp_path)
    try:
        control = service.client
        added = control.add_remote("gpu", url + "/v1/", "sk-gpu")
        assert added == {"name": "gpu", "url": url, "models": ["gpu/big"], "has_key": True}
        assert control.remotes() == [added]
        client = service.openai_client()
        assert "gpu/big" in {m.id for m in client.models.list()}
        reply = client.chat.completions.create(model="gpu/big", messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=100_000)  # fmt: skip
        assert reply.choices[0].message.content == "hi"
        # `gpu/big` here is `big` there, sent with the remote's key (not ModelDeck's, not the engines')
        assert seen.chats[-1][0]["model"] == "big" and seen.chats[-1][1] == "Bearer sk-gpu"

        deadline = time.monotonic() + 20
        names = {"engine_kv_cache_usage", "engine_generation_tokens_per_s", "engine_requests_running"}
        found: dict[str, float] = {}
        while time.monotonic() < deadline and set(found) != names:
            series = control.series(window_s=60, names=sorted(names), model="gpu/big")["series"]
            found = {s["name"]: s["v"][-1] for s in series if s["v"]}
            time.sleep(0.5)
        assert found["engine_kv_cache_usage"] == pytest.approx(0.425)
        assert found["engine_requests_running"] == 3.0
        assert found["engine_generation_tokens_per_s"] > 0  # 100 tokens between scrapes a second apart
        assert set(seen.scrapes) == {"Bearer sk-gpu"}

        saved = (paths.config / "remotes.json").read_text()
        assert "sk-gpu" not in saved and json.loads(saved)[0]["models"] == ["big"]
        keys = paths.config / "remote-keys.json"
        if keys.exists():  # no OS keyring here: the user-only file
            assert keys.stat().st_mode & 0o077 == 0

        assert control.remove_remote("gpu") == {"removed": "gpu"}
        assert "gpu/big" not in {m.id for m in client.models.list()}
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpu/big", messages=[{"role": "user", "content": "Hi"}])
    finally:
        stop_service_process(service)


def test_a_remote_that_is_down_at_start_keeps_the_models_it_listed_before(
    vllm_stand_in: tuple[str, StandIn], paths: AppPaths, tmp_path: Path
) -> None:
    url, _ = vllm_stand_in
    service = start_service_process(paths, tmp_path)
    try:
        service.client.add_remote("gpu", url, "sk-gpu")
    finally:
        stop_service_process(service)
    dead = f"http://127.0.0.1:{free_port()}"
    saved = json.loads((paths.config / "remotes.json").read_text())
    (paths.config / "remotes.json").write_text(json.dumps([{**saved[0], "url": dead}]))
    service = start_service_process(paths, tmp_path)
    try:
        client = service.openai_client()
        assert "gpu/big" in {m.id for m in client.models.list()}
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="gpu/big", messages=[{"role": "user", "content": "Hi"}])
        assert failed.value.status_code == 502 and dead in failed.value.response.json()["error"]["message"]
    finally:
        stop_service_process(service)


def test_a_remotes_file_that_does_not_read_is_kept_aside_not_emptied(paths: AppPaths, tmp_path: Path) -> None:
    paths.config.mkdir(parents=True)
    damaged = '[{"name": "gpu", "url": "http://127.0.0.1:1", "models": ["big"]},]'
    (paths.config / "remotes.json").write_text(damaged)
    service = start_service_process(paths, tmp_path)
    try:
        assert service.client.remotes() == []
    finally:
        stop_service_process(service)
    assert (paths.config / "remotes.json.bad").read_text() == damaged


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"name": "Bad Name", "url": "http://127.0.0.1:1"}, 400, "remote name 'Bad Name'"),
        ({"name": "x", "url": "ftp://host"}, 400, "expected http(s)://HOST"),
        ({"name": "x", "url": "http://user:pw@host"}, 400, "no credentials"),
        ({"name": "x", "url": "http://127.0.0.1:1", "token": "t"}, 400, "Expected a JSON object"),
        ({"name": "x", "url": "http://127.0.0.1:1", "api_key": ""}, 400, "`api_key` must be a non-empty string"),
        ({"name": "x", "url": "DEAD"}, 502, "did not answer /v1/models"),
        ({"name": "x", "url": "STAND_IN", "api_key": "wrong"}, 502, "refused the API key"),
        ({"name": "x", "url": "STAND_IN/elsewhere", "api_key": "sk-gpu"}, 502, "answered HTTP 404"),
    ],
)
def test_bad_remotes_are_refused_and_change_nothing(
    body: dict[str, Any], status: int, message: str, vllm_stand_in: tuple[str, StandIn], paths: AppPaths,
    tmp_path: Path,
) -> None:  # fmt: skip
    url, _ = vllm_stand_in
    body = {k: v.replace("STAND_IN", url).replace("DEAD", f"http://127.0.0.1:{free_port()}") if isinstance(v, str)
            else v for k, v in body.items()}  # fmt: skip
    service = start_service_process(paths, tmp_path)
    try:
        before = service.client.models()
        response = httpx.post(service.client.address.control_url + "/api/remotes", json=body, timeout=30,
                              headers={"Authorization": f"Bearer {service.client.address.token}"})  # fmt: skip
        assert response.status_code == status, response.text
        assert message in response.json()["error"]["message"]
        assert service.client.models() == before and service.client.remotes() == []
        with pytest.raises(ControlError) as missing:
            service.client.remove_remote("nobody")
        assert missing.value.status == 404
    finally:
        stop_service_process(service)


def test_a_quality_run_of_a_remote_model_says_it_needs_a_local_gguf(
    vllm_stand_in: tuple[str, StandIn], paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = vllm_stand_in
    monkeypatch.setenv("MODELDECK_REMOTE_KEY_GPU", "sk-gpu")
    service = start_service_process(paths, tmp_path, "--remote", f"gpu={url}/v1")
    try:
        for fields in ({}, {"variants": ["gpu/big"]}, {"reference": "gpu/big"}):
            model = BUNDLED_ID if fields else "gpu/big"
            with pytest.raises(ControlError) as refused:
                service.client.start_quality(model, **fields)
            assert refused.value.status == 400, fields
            assert "gpu/big is served by remote gpu: quality runs need a local GGUF model" in str(refused.value)
        assert service.client.quality()["run"] is None
    finally:
        stop_service_process(service)


def refusals(*runs: list[str]) -> list[str]:
    """What `modeldeck` prints on standard error for each set of arguments, each refused with status 2."""
    said = []
    for args in runs:
        done = subprocess.run([sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60,
                              cwd=REPO)  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        said.append(done.stderr)
    return said


def test_the_quality_and_quantize_commands_say_a_remote_model_needs_a_local_gguf(
    vllm_stand_in: tuple[str, StandIn], paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commands read the library here, which has no remote model: the running service says which remote serves
    it, instead of 'unknown model' with a hint to `modeldeck models`, which lists it."""
    url, _ = vllm_stand_in
    monkeypatch.setenv("MODELDECK_REMOTE_KEY_GPU", "sk-gpu")
    service = start_service_process(paths, tmp_path, "--remote", f"gpu={url}/v1")
    try:
        said = refusals(["quality", "gpu/big"], ["quality", BUNDLED_ID, "--variant", "gpu/big"],
                        ["quality", BUNDLED_ID, "--reference", "gpu/big"],
                        ["quantize", "gpu/big", "--to", "Q4_0"])  # fmt: skip
        served = "modeldeck: gpu/big is served by remote gpu"
        assert said == [*[f"{served}: quality runs need a local GGUF model\n"] * 3,
                        f"{served}: quantize needs a local GGUF model\n"]  # fmt: skip
    finally:
        stop_service_process(service)


def test_a_quality_run_of_an_upstream_model_says_it_needs_a_local_gguf(paths: AppPaths, tmp_path: Path) -> None:
    """An --upstream server is refused as a remote is, by the service and by the command."""
    upstream = f"http://127.0.0.1:{free_port()}/v1"  # never asked: nothing answers there
    service = start_service_process(paths, tmp_path, "--upstream", f"ext={upstream}")
    words = f"ext is served by the --upstream server at {upstream}: quality runs need a local GGUF model"
    try:
        for fields in ({}, {"variants": ["ext"]}, {"reference": "ext"}):
            with pytest.raises(ControlError) as refused:
                service.client.start_quality(BUNDLED_ID if fields else "ext", **fields)
            assert refused.value.status == 400 and words in str(refused.value), (fields, str(refused.value))
        assert service.client.quality()["run"] is None
        said = refusals(["quality", "ext"], ["quality", BUNDLED_ID, "--variant", "ext"],
                        ["quality", BUNDLED_ID, "--reference", "ext"])  # fmt: skip
        assert said == [f"modeldeck: {words}\n"] * 3
    finally:
        stop_service_process(service)


def test_serve_refuses_a_malformed_remote(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "app", "serve", "--remote", "up=ftp://x"], capture_output=True,
                          text=True, timeout=60, env={**os.environ}, cwd=REPO)  # fmt: skip
    assert done.returncode == 2 and "expected NAME=URL" in done.stderr


def test_a_remote_over_https_is_verified_and_served(
    bundled_gguf: Path, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS to a remote: the certificate is checked against the trust store (here SSL_CERT_FILE names the test's
    own certificate), so the same server is refused when the trust store does not hold it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key),
                    "-out", str(cert), "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)  # fmt: skip
    server = start_llama_server(bundled_gguf, tmp_path, tls=(key, cert))
    try:
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        service = start_service_process(paths, tmp_path)
        try:
            service.client.add_remote("secure", server.url, REMOTE_KEY)
            reply = service.openai_client().completions.create(model="secure/smollm", prompt="A, B,", max_tokens=3)
            assert reply.choices[0].text
        finally:
            stop_service_process(service)
        monkeypatch.delenv("SSL_CERT_FILE")
        service = start_service_process(paths, tmp_path)
        try:
            with pytest.raises(openai.APIStatusError) as failed:  # listed before, now untrusted
                service.openai_client().completions.create(model="secure/smollm", prompt="A", max_tokens=3)
            assert failed.value.status_code == 502
        finally:
            stop_service_process(service)
    finally:
        server.stop()


def test_remote_keys_without_an_os_keyring_live_in_a_user_only_file(
    paths: AppPaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    import keyring
    from keyring.backends.fail import Keyring as NoKeyring

    from app.service.remotes import RemoteKeys, key_env_name

    monkeypatch.setattr(keyring, "get_keyring", lambda: NoKeyring())
    keys = RemoteKeys(paths)
    keys.set("gpu.a", "sk-1")
    keys.set("cpu", "sk-2")
    stored = paths.config / "remote-keys.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    assert keys.get("gpu.a") == "sk-1" and keys.get("nobody") is None
    monkeypatch.setenv(key_env_name("gpu.a"), "sk-env")
    assert key_env_name("gpu.a") == "MODELDECK_REMOTE_KEY_GPU_A" and keys.get("gpu.a") == "sk-env"
    keys.delete("gpu.a")
    assert json.loads(stored.read_text()) == {"cpu": "sk-2"}

    # A file that no longer reads (a hand edit left a trailing comma) is kept aside, not written over by a save.
    damaged = '{"cpu": "sk-2", "lab": "sk-lab",}'
    stored.write_text(damaged)
    keys.set("new", "sk-new")
    assert (paths.config / "remote-keys.json.bad").read_text() == damaged
    assert json.loads(stored.read_text()) == {"new": "sk-new"}
