"""`modeldeck serve` as a real process on the bundled model, used through the official openai client."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import openai
import psutil
import pytest
from filelock import FileLock

from app.client import find_service
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.hub_server import FakeHub
from tests.support.service import REPO, RunningService, free_port, start_service_process, stop_service_process
from tests.support.slow_stop import service_slow_to_stop
from tests.support.standin_http import StandInHandler, serving
from tests.support.waiting import wait_for


def test_chat_streamed_chat_and_completions(service: RunningService) -> None:
    client = service.openai_client()
    chat = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16
    )
    assert chat.model == BUNDLED_ID
    assert chat.choices[0].message.content
    assert chat.choices[0].finish_reason in ("stop", "length")
    assert chat.usage is not None and chat.usage.prompt_tokens > 0 and 0 < chat.usage.completion_tokens <= 16

    stream = client.chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Count to five."}], max_tokens=16, stream=True
    )
    pieces, finish = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces).strip()
    assert finish in ("stop", "length")

    completion = client.completions.create(model=BUNDLED_ID, prompt="The sky is", max_tokens=8)
    assert completion.choices[0].text
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.usage is not None and completion.usage.completion_tokens > 0


def test_two_concurrent_streams_both_complete(service: RunningService) -> None:
    """llama-cpp-python's default would abort the first stream when the second request arrives."""
    results: dict[int, tuple[str, str | None]] = {}

    def stream(index: int) -> None:
        client = service.openai_client()
        text, finish = [], None
        for chunk in client.chat.completions.create(
            model=BUNDLED_ID, messages=[{"role": "user", "content": f"Tell a story number {index}."}],
            max_tokens=32, stream=True,
        ):  # fmt: skip
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        results[index] = ("".join(text), finish)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(results) == [0, 1]
    for text, finish in results.values():
        assert text.strip()
        assert finish in ("stop", "length"), "a stream was cut off"


def test_killed_engine_is_restarted_and_serves_again(service: RunningService) -> None:
    model = service.model()
    os.kill(model["pid"], signal.SIGKILL)
    wait_for(lambda: (m := service.model())["state"] == "ready" and m["restarts"] == 1, 60, "a restart, ready", 0.1)
    reply = service.openai_client().completions.create(model=BUNDLED_ID, prompt="Hello", max_tokens=4)
    assert reply.choices[0].text


def test_service_sigkill_leaves_no_engine(service: RunningService) -> None:
    pid = service.model()["pid"]
    engine = psutil.Process(pid)
    service.process.kill()
    service.process.wait()
    _, alive = psutil.wait_procs([engine], timeout=5)
    assert not alive, "the engine outlived the SIGKILLed service"


def test_leftover_engine_from_crashed_service_is_reaped(paths: AppPaths, tmp_path: Path) -> None:
    """With the parent-death signal in place no engine survives; a record left by a crash is cleaned up."""
    first = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    first.process.kill()
    first.process.wait()
    first.client.close()
    assert list(paths.engine_records.glob("*.json")), "the crashed service left no record to check"
    second = start_service_process(paths, tmp_path)
    try:
        assert not list(paths.engine_records.glob("*.json"))
    finally:
        stop_service_process(second)


def test_sigterm_stops_engines_and_cleans_up(service: RunningService, paths: AppPaths) -> None:
    engine = psutil.Process(service.model()["pid"])
    service.process.send_signal(signal.SIGTERM)
    assert service.process.wait(timeout=30) == 0
    assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE
    assert not paths.service_file.exists()
    assert not paths.control_token_file.exists()


class _Completing(StandInHandler):
    """An OpenAI-shaped upstream that completes every prompt at once."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        self.send_json(200, {"id": "x", "object": "text_completion", "usage": usage,
                             "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]})  # fmt: skip


def test_sighup_is_an_orderly_stop_that_keeps_the_last_requests(paths: AppPaths, tmp_path: Path) -> None:
    """Its terminal closed: the service stops as on SIGTERM, with the request answered just before in the request
    log (SIGHUP used to end the process at once: no clean-up, and the log's last half second lost)."""
    with serving(_Completing) as upstream:
        running = start_service_process(paths, tmp_path, "--upstream", f"upstream={upstream}")
        try:
            running.openai_client().completions.create(model="upstream", prompt="Hi", max_tokens=2)
            running.process.send_signal(signal.SIGHUP)
            assert running.process.wait(timeout=30) == 0
        finally:
            stop_service_process(running)
    assert not paths.service_file.exists() and not paths.control_token_file.exists()
    with contextlib.closing(sqlite3.connect(paths.requests_db)) as database:
        assert database.execute("SELECT count(*) FROM requests WHERE model = 'upstream'").fetchone() == (1,)


def _serve_another() -> subprocess.CompletedProcess[str]:
    """A second `modeldeck serve` of this test's data folder, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", str(free_port())], capture_output=True, text=True,
        timeout=60, cwd=REPO, env={**os.environ, "MODELDECK_API_KEY": "test-key"}, check=False,
    )  # fmt: skip


def test_a_second_service_of_the_data_folder_is_refused_and_leaves_the_first_whole(
    service: RunningService, paths: AppPaths
) -> None:
    """A second `serve` of one folder would reap the first one's engines and take over its discovery file and control
    token, and withdraw them when it stopped: every command would then find no service while the first still ran."""
    engine = psutil.Process(service.model()["pid"])
    pid, address = service.process.pid, service.client.address
    second = _serve_another()
    assert second.returncode == 2
    assert second.stderr.strip() == (
        f"modeldeck: A ModelDeck service already runs for this data folder (pid {pid}, {service.url}): use it, stop "
        f"it first (Ctrl-C where it runs, or kill {pid}), or give this one its own folder with MODELDECK_HOME."
    )
    assert find_service(paths) == address
    assert service.model()["state"] == "ready" and engine.is_running()

    # A discovery file that another process has published since is not this service's to withdraw.
    paths.service_file.write_text(paths.service_file.read_text().replace(f'"pid": {pid}', f'"pid": {os.getpid()}'))
    service.process.terminate()
    assert service.process.wait(timeout=30) == 0
    assert paths.service_file.exists() and paths.control_token_file.exists()


def test_a_second_service_refused_while_the_first_stops_says_it_is_stopping(
    hub: FakeHub, gguf_slice: bytes, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopping service holds the data folder and its discovery file until its downloads have paused and its engines
    have stopped (here up to 5 s each: a download stalled on the Hub, an engine that does not act on SIGTERM), and
    answers no more meanwhile. A second `serve` then said the first "already runs ... use it"."""
    with service_slow_to_stop(hub, gguf_slice, paths, tmp_path, monkeypatch) as old:
        wait_for(lambda: "stopping" in old.output(), 30, "the service to begin stopping")
        second = _serve_another()
        assert old.process.poll() is None, "the first service stopped before the second was refused"
        assert old.process.wait(timeout=30) == 0
    assert second.returncode == 2
    assert second.stderr.strip() == (
        f"modeldeck: The ModelDeck service of this data folder (pid {old.process.pid}) is stopping: try again in a "
        "moment, or give this one its own folder with MODELDECK_HOME."
    )


def test_a_service_refused_beside_a_discovery_file_nested_too_deeply_says_why_in_one_line(paths: AppPaths) -> None:
    """The refusal reads the discovery file to name the running service; json.loads raised RecursionError on it."""
    paths.state.mkdir(parents=True)
    paths.service_file.write_text("[" * 100_000)
    with FileLock(paths.service_lock):  # the data folder is another service's
        second = _serve_another()
    assert second.returncode == 2
    assert second.stderr.strip().startswith("modeldeck: Another ModelDeck service of this data folder is starting")


def test_corrupt_gguf_fails_clearly_and_service_stays_up(paths: AppPaths, tmp_path: Path, bundled_gguf: Path) -> None:
    paths.models_dir.mkdir(parents=True)
    broken = paths.models_dir / "broken-model.gguf"
    broken.write_bytes(bundled_gguf.read_bytes()[:1_000_000])
    service = start_service_process(paths, tmp_path, "--model", "broken-model")
    try:
        model = service.model("broken-model")
        assert model["state"] == "failed"
        assert str(broken) in model["message"] and "truncated" in model["message"]
        with pytest.raises(openai.APIStatusError) as error:
            service.openai_client().completions.create(model="broken-model", prompt="x", max_tokens=2)
        assert error.value.status_code == 503
        # what to do, not the file's path or the preflight's detail: those are the control API's (above)
        assert "could not be started" in str(error.value) and "truncated" not in str(error.value)
        assert service.client.health()["status"] == "ok"
        assert service.openai_client().completions.create(model=BUNDLED_ID, prompt="Hi", max_tokens=2).choices
    finally:
        stop_service_process(service)


@pytest.mark.parametrize(
    ("flag", "advice"),
    [("--port", "serve --port N"), ("--control-port", "serve --control-port N"), ("--ollama-port", "--ollama-port N")],
)
def test_port_in_use_is_a_clear_error(paths: AppPaths, flag: str, advice: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        free = {"--port": str(free_port()), "--control-port": str(free_port())}
        other = [part for name, value in free.items() if name != flag for part in (name, value)]
        result = subprocess.run(
            [sys.executable, "-m", "app", "serve", flag, str(port), *other],
            capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "MODELDECK_API_KEY": "k"},
        )  # fmt: skip
    assert result.returncode == 2
    assert f"Port {port} on 127.0.0.1 is already in use" in result.stderr and advice in result.stderr
    assert "Traceback" not in result.stderr


def test_lan_bind_without_key_is_refused(paths: AppPaths) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--host", "0.0.0.0", "--port", str(free_port()), "--no-api-key"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 2
    assert "Refusing to listen on 0.0.0.0 without an API key" in result.stderr


def test_requests_need_the_key_and_valid_input(service: RunningService) -> None:
    with pytest.raises(openai.AuthenticationError):
        service.openai_client(api_key="wrong").models.list()
    models = service.openai_client().models.list()
    assert [m.id for m in models.data] == [BUNDLED_ID]
    with pytest.raises(openai.NotFoundError) as missing:
        service.openai_client().completions.create(model="no-such-model", prompt="x")
    assert BUNDLED_ID in str(missing.value)
    headers = {"Authorization": f"Bearer {service.api_key}", "Content-Type": "application/json"}
    bad = httpx.post(f"{service.url}/chat/completions", content=b"{not json", headers=headers, timeout=10)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    wrong_type = httpx.post(f"{service.url}/chat/completions", content=b"{}", timeout=10,
                            headers={**headers, "Content-Type": "text/plain"})  # fmt: skip
    assert wrong_type.status_code == 415
    rebinding = httpx.get(f"{service.url}/models", headers={**headers, "Host": "attacker.example"}, timeout=10)
    assert rebinding.status_code == 403
    assert service.client.health()["status"] == "ok"
