"""`modeldeck run / start / stop / logs / rm / status / completion / export` as a user runs them: real subprocesses
against one real service for the whole module (it keeps request text, so a test can read what a chat sent), serving
the bundled model."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from app.client import ControlClient, find_service
from app.hub.library import BUNDLED_ID, bundled_model
from app.paths import AppPaths, app_paths
from tests.support.service import REPO, RunningService, free_port, start_service_process, stop_service_process
from tests.support.waiting import wait_for

COPY_ID = "smollm2-copy"
BROKEN_ID = "broken-model"  # a GGUF cut short: the engine cannot load it


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-models") / "modeldeck-home"


@pytest.fixture(autouse=True)
def modeldeck_home(shared_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test of this module in the shared service's home (overrides the per-test home of tests/conftest.py)."""
    monkeypatch.setenv("MODELDECK_HOME", str(shared_home))
    return shared_home


@pytest.fixture(scope="module")
def shared_service(shared_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MODELDECK_HOME", str(shared_home))
        spec = bundled_model()
        assert spec is not None and spec.path is not None
        app_paths().models_dir.mkdir(parents=True)
        (app_paths().models_dir / f"{BROKEN_ID}.gguf").write_bytes(spec.path.read_bytes()[:1_000_000])
        running = start_service_process(app_paths(), tmp_path_factory.mktemp("service-log"), "--log-request-text")
        try:
            yield running
        finally:
            stop_service_process(running)


@pytest.fixture(autouse=True)
def no_leftover_processes(shared_service: RunningService) -> Iterator[None]:
    """As in tests/conftest.py, but the module's service and its engines may outlive a test."""
    yield
    service = psutil.Process(shared_service.process.pid)
    keep = {service.pid} | {child.pid for child in service.children(recursive=True)}
    others = [child for child in psutil.Process().children(recursive=True) if child.pid not in keep]
    _, alive = psutil.wait_procs(others, timeout=10)
    for process in alive:
        process.kill()
    assert not alive, f"test left processes running: {[p.pid for p in alive]}"


def modeldeck(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], input=stdin, capture_output=True, text=True, timeout=180, cwd=REPO,
        env={**os.environ, **(env or {})}, check=False,
    )  # fmt: skip


def record(service: RunningService, model_id: str) -> dict[str, Any]:
    return record_of(service.client, model_id)


def record_of(client: ControlClient, model_id: str) -> dict[str, Any]:
    return next(m for m in client.models() if m["id"] == model_id)


def logged_chats(paths: AppPaths, after: int) -> list[tuple[list[dict[str, str]], str]]:
    """(messages, completion) of each chat request the service logged, after the first `after` of them."""
    with sqlite3.connect(paths.requests_db) as db:
        rows = db.execute(
            "SELECT prompt_text, completion_text FROM requests WHERE route = '/v1/chat/completions' ORDER BY time"
        ).fetchall()
    return [(json.loads(prompt), completion) for prompt, completion in rows[after:]]


def chat_count(paths: AppPaths) -> int:
    if not paths.requests_db.exists():
        return 0
    with sqlite3.connect(paths.requests_db) as db:
        count: int = db.execute("SELECT count(*) FROM requests WHERE route = '/v1/chat/completions'").fetchone()[0]
    return count


# -- run ---------------------------------------------------------------------------------------------------------


def test_run_with_a_prompt_streams_one_answer(shared_service: RunningService, paths: AppPaths) -> None:
    before = chat_count(paths)
    result = modeldeck("run", BUNDLED_ID, "Name a colour.", "--max-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    assert record(shared_service, BUNDLED_ID)["state"] == "ready"  # started for the chat
    last = shared_service.client.requests(1)[0]
    assert last["model"] == BUNDLED_ID and last["stream"] is True and last["status"] == 200
    [(messages, completion)] = wait_for(lambda: logged_chats(paths, before), 10, "the request in the log")
    assert messages == [{"role": "user", "content": "Name a colour."}]
    assert completion.strip() == result.stdout.strip()  # what was printed is the model's streamed answer


def test_interactive_run_keeps_the_history_and_reads_multi_line_messages(
    shared_service: RunningService, paths: AppPaths
) -> None:
    before = chat_count(paths)
    stdin = 'My name is Ada.\n"""\nWhat is\nmy name?\n"""\nOne line, \\\nand the next.\n/bye\nnot read\n'
    result = modeldeck("run", BUNDLED_ID, "--max-tokens", "24", stdin=stdin)
    assert result.returncode == 0, result.stderr
    chats = wait_for(lambda: len(logged_chats(paths, before)) == 3 and logged_chats(paths, before), 20, "3 turns")
    (first, first_answer), (second, second_answer), (third, _) = chats
    assert first == [{"role": "user", "content": "My name is Ada."}]
    # each turn carries the ones before, the answers as the model wrote them; a triple-quoted block is one message,
    # and so are lines joined by a trailing backslash
    assert second == [*first, {"role": "assistant", "content": first_answer},
                      {"role": "user", "content": "What is\nmy name?"}]  # fmt: skip
    assert third == [*second, {"role": "assistant", "content": second_answer},
                     {"role": "user", "content": "One line, \nand the next."}]  # fmt: skip
    assert first_answer.strip() in result.stdout


def test_ctrl_c_stops_the_answer_not_the_chat(shared_service: RunningService, paths: AppPaths) -> None:
    before = chat_count(paths)
    # As from a terminal: SIGINT handled by default, even where the suite runs as a background job (whose
    # commands a shell without job control starts with SIGINT ignored, and Python then raises no KeyboardInterrupt).
    chat = subprocess.Popen(
        [sys.executable, "-m", "app", "run", BUNDLED_ID, "--max-tokens", "2000"], cwd=REPO, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    assert chat.stdin is not None and chat.stdout is not None
    try:
        chat.stdin.write("Write a very long story about a dragon.\n")
        chat.stdin.flush()
        chat.stdout.read(1)  # the answer has begun
        chat.send_signal(signal.SIGINT)
        chat.stdin.write("Say yes.\n/bye\n")
        chat.stdin.flush()
        out, err = chat.communicate(timeout=120)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
    assert chat.returncode == 0, err
    assert "(stopped)" in err, out

    def second_turn() -> list[dict[str, str]] | None:
        # the stopped request is logged when the engine lets it go, which may be after the second one
        return next((m for m, _ in logged_chats(paths, before) if m[-1]["content"] == "Say yes."), None)

    messages = wait_for(second_turn, 30, "the second turn in the request log")
    # the chat went on after Ctrl-C, with the stopped answer in its history as far as it went
    assert messages[0] == {"role": "user", "content": "Write a very long story about a dragon."}
    assert messages[1]["role"] == "assistant" and messages[1]["content"] and len(messages) == 3


def test_an_engine_dying_mid_answer_cuts_the_answer_not_the_chat(
    shared_service: RunningService, paths: AppPaths
) -> None:
    """The gateway ends a stream whose engine failed with an error event: the chat says so, keeps the answer as far
    as it went, and the next message is answered by the engine the service restarted."""
    before = chat_count(paths)
    chat = subprocess.Popen(
        [sys.executable, "-m", "app", "run", BUNDLED_ID, "--max-tokens", "2000"], cwd=REPO, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert chat.stdin is not None and chat.stdout is not None
    try:
        chat.stdin.write("Write a very long story about a dragon.\n")
        chat.stdin.flush()
        chat.stdout.read(1)  # the answer has begun
        os.kill(shared_service.model()["pid"], signal.SIGKILL)
        chat.stdin.write("Say yes.\n/bye\n")
        chat.stdin.flush()
        out, err = chat.communicate(timeout=120)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
    assert chat.returncode == 0, err
    assert "(cut short: The engine stopped answering" in err, err
    assert "Traceback" not in err
    assert shared_service.model()["restarts"] >= 1

    def second_turn() -> tuple[list[dict[str, str]], str] | None:
        return next(((m, a) for m, a in logged_chats(paths, before) if m[-1]["content"] == "Say yes."), None)

    messages, answer = wait_for(second_turn, 30, "the second turn in the request log")
    assert messages[1]["role"] == "assistant" and messages[1]["content"]  # the cut answer, as far as it went
    assert answer and answer.strip() in out  # answered by the restarted engine


# -- start, stop, status -------------------------------------------------------------------------------------------


def test_start_with_overrides_then_stop_all(shared_service: RunningService) -> None:
    assert modeldeck("stop", "--all").returncode == 0  # the overrides apply to a new start only
    started = modeldeck("start", BUNDLED_ID, "--context", "1024", "--threads", "1", "--json")
    assert started.returncode == 0, started.stderr
    printed = json.loads(started.stdout)
    assert printed["state"] == "ready" and printed["plan"]["context"] == 1024 and printed["plan"]["threads"] == 1
    model = record(shared_service, BUNDLED_ID)
    assert model["state"] == "ready" and model["plan"]["context"] == 1024 and model["plan"]["threads"] == 1

    status = modeldeck("status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["service"]["pid"] == shared_service.process.pid
    assert report["endpoint"] == shared_service.url and report["api_key"]["required"] is True
    [engine] = [e for e in report["engines"] if e["state"] == "ready"]
    assert engine["id"] == BUNDLED_ID and engine["pid"] == model["pid"]
    text = modeldeck("status").stdout
    assert f"{BUNDLED_ID}: ready" in text and shared_service.url in text

    stopped = modeldeck("stop", "--all")
    assert stopped.returncode == 0, stopped.stderr
    assert f"{BUNDLED_ID}: stopped" in stopped.stdout
    assert all(m["state"] == "stopped" for m in shared_service.client.models())
    assert "No engines are running." in modeldeck("stop", "--all").stdout
    assert "none running" in modeldeck("status").stdout


def test_start_refuses_bad_values_with_the_service_reason(shared_service: RunningService) -> None:
    assert modeldeck("stop", "--all").returncode == 0  # whatever an earlier test left running
    small = modeldeck("start", BUNDLED_ID, "--context", "10")
    assert small.returncode == 1
    assert small.stderr.startswith("modeldeck: ") and "context" in small.stderr and len(small.stderr.splitlines()) == 1
    assert record(shared_service, BUNDLED_ID)["state"] == "stopped"  # nothing started
    words = modeldeck("start", BUNDLED_ID, "--context", "many")
    assert words.returncode == 2 and "--context: not a whole number: 'many'" in words.stderr
    engine = modeldeck("start", BUNDLED_ID, "--engine", "nope")
    assert engine.returncode == 1 and "engine" in engine.stderr


def test_a_model_that_fails_to_load_says_why(shared_service: RunningService) -> None:
    for args in (("start", BROKEN_ID), ("run", BROKEN_ID, "hi")):
        result = modeldeck(*args)
        assert result.returncode == 1, args
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(f"modeldeck: {BROKEN_ID} did not load (failed): ") and "truncated" in line, line
    assert record(shared_service, BROKEN_ID)["state"] == "failed"
    assert f"{BROKEN_ID}: failed" in modeldeck("status").stdout


def test_unknown_model_is_one_clear_line(shared_service: RunningService) -> None:
    for args in (("start", "nope"), ("run", "nope", "hi"), ("stop", "nope"), ("logs", "nope"), ("logs", "nope", "-f"),
                 ("rm", "nope", "-y")):  # fmt: skip
        result = modeldeck(*args)
        assert result.returncode == 1, args
        assert result.stderr.strip().splitlines() in (["modeldeck: Unknown model 'nope'."],
                                                      ["modeldeck: No model 'nope' in the library."]), args  # fmt: skip


# -- logs ----------------------------------------------------------------------------------------------------------


def _lines_of(stream: Any) -> tuple[queue.Queue[str], threading.Thread]:
    """Each line of `stream` as it comes, read on a thread (which ends at the end of the stream)."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    return lines, reader


def test_logs_tail_and_follow(shared_service: RunningService) -> None:
    started = modeldeck("start", BUNDLED_ID)
    assert started.returncode == 0 and started.stdout.startswith(f"{BUNDLED_ID} is ready: "), started.stderr
    tail = modeldeck("logs", BUNDLED_ID, "--tail", "3")
    assert tail.returncode == 0, tail.stderr
    printed = tail.stdout.splitlines()
    assert len(printed) == 3 and printed == shared_service.client.logs(BUNDLED_ID, 3)  # the engine is idle

    command = [sys.executable, "-m", "app", "logs", BUNDLED_ID, "-f", "--tail", "1"]
    with subprocess.Popen(command, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as follow:
        assert follow.stdout is not None
        lines, reader = _lines_of(follow.stdout)
        try:
            first = lines.get(timeout=60)  # the tail: subscribed
            assert first in shared_service.client.logs(BUNDLED_ID, 50)
            earlier = set(shared_service.client.logs(BUNDLED_ID, 500))
            shared_service.openai_client().chat.completions.create(
                model=BUNDLED_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
            )
            new = lines.get(timeout=60)
            while new in earlier:  # a line logged between the subscription and the tail may come twice
                new = lines.get(timeout=60)
            assert new in shared_service.client.logs(BUNDLED_ID, 500)  # a line the engine wrote for that request
            follow.send_signal(signal.SIGINT)
            assert follow.wait(timeout=30) == 0
        finally:
            if follow.poll() is None:
                follow.kill()
                follow.wait()
            reader.join(timeout=30)


# -- rm --------------------------------------------------------------------------------------------------------------


def test_rm_asks_and_yes_deletes(shared_service: RunningService, tmp_path: Path) -> None:
    spec = bundled_model()
    assert spec is not None and spec.path is not None
    source = tmp_path / f"{COPY_ID}.gguf"
    shutil.copyfile(spec.path, source)
    imported = modeldeck("import", str(source), "--link")  # through the running service, which serves it at once
    assert imported.returncode == 0, imported.stderr
    target = Path(next(m["path"] for m in shared_service.client.library()["models"] if m["id"] == COPY_ID))
    assert record(shared_service, COPY_ID)["state"] == "stopped" and target.samefile(source)
    assert f"{COPY_ID}: linked into {target}" in imported.stdout
    again = modeldeck("import", str(source))
    assert again.returncode == 2 and "already in the library" in again.stderr

    refused = modeldeck("rm", COPY_ID, stdin="n\n")
    assert refused.returncode == 1 and "Nothing deleted." in refused.stdout and f"Delete {COPY_ID}" in refused.stdout
    assert target.is_file()
    no_answer = modeldeck("rm", COPY_ID)  # end of input is no
    assert no_answer.returncode == 1 and target.is_file()
    bundled = modeldeck("rm", BUNDLED_ID, "-y")
    assert bundled.returncode == 1 and "not downloaded or imported" in bundled.stderr

    deleted = modeldeck("rm", COPY_ID, stdin="y\n")
    assert deleted.returncode == 0, deleted.stderr
    assert not target.exists() and COPY_ID not in [m["id"] for m in shared_service.client.models()]
    assert modeldeck("rm", COPY_ID, "-y").returncode == 1  # gone


# -- without a service -----------------------------------------------------------------------------------------------


def test_run_starts_the_service_when_none_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As the window does: in the background, on the port of $MODELDECK_PORT or the settings, left running."""
    port = free_port()
    monkeypatch.setenv("MODELDECK_HOME", str(tmp_path / "fresh"))
    result = modeldeck("run", BUNDLED_ID, "Hi", "--max-tokens", "4", env={"MODELDECK_PORT": str(port)})
    address = find_service(app_paths())
    assert address is not None, result.stderr
    service = psutil.Process(address.pid)
    client = ControlClient(address)
    try:
        assert result.returncode == 0, result.stderr
        assert "Starting the ModelDeck service" in result.stderr and result.stdout.strip()
        assert client.endpoint()["url"] == f"http://127.0.0.1:{port}/v1"
        assert record_of(client, BUNDLED_ID)["state"] == "ready"  # still running after the command
    finally:
        client.shutdown()
        client.close()
        psutil.wait_procs([service], timeout=60)
    assert not service.is_running()


def test_commands_that_need_the_service_say_it_is_down(tmp_path: Path) -> None:
    env = {"MODELDECK_HOME": str(tmp_path / "no-service")}
    for args in (("stop", "--all"), ("logs", BUNDLED_ID), ("status",)):
        result = modeldeck(*args, env=env)
        assert result.returncode == 1, args
        assert result.stderr.strip() == (
            "modeldeck: The ModelDeck service is not running (start it with `modeldeck serve`, or `modeldeck start "
            "MODEL`)."
        ), args


# -- completion ------------------------------------------------------------------------------------------------------


def complete(script: str, *words: str) -> list[str]:
    """What bash offers for the last of `words` (a command line being typed)."""
    line = " ".join(f"'{w}'" for w in ("modeldeck", *words))
    done = subprocess.run(
        ["bash", "-c", f'eval "$1"; COMP_WORDS=({line}); COMP_CWORD={len(words)}; _modeldeck_complete; '
         'printf "%s\\n" "${COMPREPLY[@]}"', "bash", script],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.split()


def test_bash_completion_follows_the_parser() -> None:
    script = modeldeck("completion", "bash").stdout
    assert set(complete(script, "st")) == {"status", "start", "stop"}
    assert complete(script, "serve", "--tls", "") == ["auto", "on", "off"]
    assert complete(script, "engines", "build", "--back") == ["--backend"]
    assert "--tail" in complete(script, "logs", "--")
    assert modeldeck("completion", "zsh").stdout.count("bashcompinit") == 2
    fish = modeldeck("completion", "fish").stdout
    assert "complete -c modeldeck -n '__fish_seen_subcommand_from logs' -s f" in fish
    assert modeldeck("completion", "tcsh").returncode == 2
