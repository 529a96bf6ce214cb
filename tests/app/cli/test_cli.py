"""The `modeldeck` command as a user runs it."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import psutil
import pytest

from app.cli import main
from app.client import ControlClient, find_service
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.hub_server import FakeHub
from tests.support.service import REPO, RunningService, free_port, start_service_process, stop_service_process
from tests.support.slow_stop import service_slow_to_stop
from tests.support.standin_http import StandInHandler, serving


def modeldeck(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def test_key_prints_the_same_key_twice() -> None:
    first, second = modeldeck("key"), modeldeck("key")
    assert first.returncode == 0
    assert first.stdout.strip() and first.stdout == second.stdout
    assert "no OS keyring is available" in first.stderr


def test_models_lists_the_bundled_model() -> None:
    result = modeldeck("models")
    assert result.returncode == 0
    assert BUNDLED_ID in result.stdout and "stopped" in result.stdout


def test_ps_without_service_says_so() -> None:
    result = modeldeck("ps")
    assert result.returncode == 1
    assert "not running" in result.stdout


def test_a_discovery_file_nested_too_deeply_is_no_service(paths: AppPaths) -> None:
    """json.loads raised RecursionError on it, and every command that looks for the service printed a traceback."""
    paths.state.mkdir(parents=True)
    paths.service_file.write_text("[" * 100_000)
    paths.control_token_file.write_text("token")
    result = modeldeck("ps")
    assert result.returncode == 1, result.stderr
    assert "not running" in result.stdout and "Traceback" not in result.stderr


def test_ps_and_models_with_running_service(service: RunningService) -> None:
    ps = modeldeck("ps")
    assert ps.returncode == 0
    pid = service.model()["pid"]
    assert BUNDLED_ID in ps.stdout and "ready" in ps.stdout and str(pid) in ps.stdout
    assert "MiB at load, predicted" in ps.stdout  # the service checked its memory prediction at load
    assert "ready" in modeldeck("models").stdout


def test_models_and_ps_close_their_client_of_the_service(
    paths: AppPaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Neither closed its ControlClient: its kept-alive connection to the service was left to the garbage collector,
    which says so with a ResourceWarning."""
    running = start_service_process(paths, tmp_path)
    try:
        for command in ("models", "ps"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with pytest.raises(SystemExit) as exited:
                    main([command])
                gc.collect()
            assert exited.value.code in (0, None), capsys.readouterr().err
            assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == [], command
    finally:
        stop_service_process(running)


def test_models_says_a_models_dir_is_not_read_while_the_service_runs(paths: AppPaths, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    running = start_service_process(paths, tmp_path)
    try:
        result = modeldeck("models", "--models-dir", str(folder))
    finally:
        stop_service_process(running)
    assert result.returncode == 0
    assert BUNDLED_ID in result.stdout  # the service's models, still listed
    assert result.stderr.strip() == (
        f"modeldeck: --models-dir {folder} is not read while the service runs: these are the service's models, "
        f"from the folders it was started with (to serve the models in {folder}, start it with `modeldeck serve "
        f"--models-dir {folder}`)"
    )


def test_serve_refuses_a_bad_model_ttl() -> None:
    for value in ("second=soon", "second=0", "=5"):
        result = modeldeck("serve", "--model-ttl", value)
        assert result.returncode == 2
        assert "expected ID=SECONDS" in result.stderr


def test_serve_refuses_a_ttl_for_an_upstream_model() -> None:
    result = modeldeck(
        "serve", "--port", str(free_port()), "--upstream", "far=http://127.0.0.1:9/v1", "--model-ttl", "far=5",
        env={"MODELDECK_API_KEY": "k"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "--model-ttl far: an --upstream model is not started or stopped by ModelDeck" in result.stderr


def test_serve_refuses_a_ttl_for_an_unknown_model() -> None:
    result = modeldeck("serve", "--port", str(free_port()), "--model-ttl", "nope=5", env={"MODELDECK_API_KEY": "k"})
    assert result.returncode == 2
    assert "Unknown model nope" in result.stderr


def test_two_commands_starting_the_service_at_once_both_use_the_one_that_starts(paths: AppPaths) -> None:
    """Both find no service and start one; the one that loses the race exits, and its command goes on with the
    winner instead of failing on the port the winner holds."""
    env = {**os.environ, "MODELDECK_PORT": str(free_port())}
    command = [sys.executable, "-m", "app", "start", BUNDLED_ID]
    starts = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
              for _ in range(2)]  # fmt: skip
    try:
        outputs = [start.communicate(timeout=120) for start in starts]
    finally:
        for start in starts:
            start.kill()
            start.wait()
        address = find_service(paths)
        services = [process for process in psutil.process_iter() if _serves_this_folder(process)]
        if address is not None:
            client = ControlClient(address)
            client.shutdown()
            client.close()
        psutil.wait_procs(services, timeout=60)
    for start, (stdout, stderr) in zip(starts, outputs, strict=True):
        assert "Starting the ModelDeck service" in stderr  # both raced to start one
        assert start.returncode == 0, stderr
        assert f"{BUNDLED_ID} is ready" in stdout
    assert address is not None and [service.pid for service in services] == [address.pid]


def test_a_command_that_starts_the_service_while_the_last_one_stops_waits_for_it(
    hub: FakeHub, gguf_slice: bytes, paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopping service holds the data folder until its downloads have paused (up to 5 s for one stalled on the Hub)
    and its engines have stopped (up to 5 s for one that does not act on SIGTERM), and answers no more meanwhile. The
    service a command started then gave up on the folder after CLAIM_WAIT_S, and the command failed with "The service
    exited with code 2", though the folder was free a moment later."""
    with service_slow_to_stop(hub, gguf_slice, paths, tmp_path, monkeypatch) as old:
        try:
            start = modeldeck("start", BUNDLED_ID, env={"MODELDECK_PORT": str(free_port())})
            assert old.process.wait(timeout=30) == 0
        finally:
            stop_service_process(old)  # gone before the service the command started is looked for
            address = find_service(paths)
            if address is not None and address.pid != old.process.pid:
                client = ControlClient(address)
                client.shutdown()
                client.close()
                psutil.wait_procs([psutil.Process(address.pid)], timeout=60)
    assert start.returncode == 0, start.stderr
    assert f"{BUNDLED_ID} is ready" in start.stdout
    assert address is not None and address.pid != old.process.pid


def _serves_this_folder(process: psutil.Process) -> bool:
    """Whether `process` is a `modeldeck serve` of this test's MODELDECK_HOME."""
    try:
        return (
            process.cmdline()[1:4] == ["-m", "app", "serve"]
            and process.environ().get("MODELDECK_HOME") == os.environ["MODELDECK_HOME"]
        )
    except psutil.Error:
        return False


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """`modeldeck models | head -1`: the pipe's reader is gone before the command writes (its end is closed here
    first, so the writes fail every time, not by a race)."""
    for args in (["models"], ["completion", "bash"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            result = subprocess.run(
                [sys.executable, "-m", "app", *args], stdout=write_end, stderr=subprocess.PIPE, text=True,
                timeout=60, cwd=REPO,
            )  # fmt: skip
        finally:
            os.close(write_end)
        assert result.returncode == 1, args
        assert result.stderr == "", args


class _BrokenStreamHandler(StandInHandler):
    """A server ModelDeck serves with --upstream, whose answer breaks off in an event that is not JSON."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_json(200, {"object": "list", "data": [{"id": "odd", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        first = json.dumps({"choices": [{"index": 0, "delta": {"content": "Hello"}}]})
        self.send_body(200, f"data: {first}\n\ndata: {{not json\n\ndata: [DONE]\n\n".encode(), "text/event-stream")


def test_an_answer_breaking_off_in_an_event_that_is_not_json_is_cut_short_not_a_traceback(
    paths: AppPaths, tmp_path: Path
) -> None:
    with serving(_BrokenStreamHandler) as upstream:
        service = start_service_process(paths, tmp_path, "--upstream", f"odd={upstream}")
        try:
            result = modeldeck("run", "odd", "Say hello.")
        finally:
            stop_service_process(service)
    assert result.returncode == 1
    assert result.stdout == "Hello\n"  # what came before the break stays
    assert result.stderr == "(cut short: The answer broke off: an event that is not JSON: '{not json')\n"


def test_a_file_in_the_way_of_a_folder_is_one_line_and_stays(modeldeck_home: Path, bundled_gguf: Path) -> None:
    modeldeck_home.mkdir()
    (modeldeck_home / "config").write_text("mine")
    (modeldeck_home / "data").mkdir()
    (modeldeck_home / "data" / "models").write_text("mine too")
    in_the_way = "(a file is where ModelDeck needs a folder: move it aside)"
    key = modeldeck("key")
    assert key.returncode == 1
    assert key.stderr.splitlines()[-1] == f"modeldeck: {modeldeck_home / 'config'}: File exists {in_the_way}"
    imported = modeldeck("import", str(bundled_gguf))
    assert imported.returncode == 1
    assert imported.stderr.splitlines()[-1] == (
        f"modeldeck: {modeldeck_home / 'data' / 'models'}: File exists {in_the_way}"
    )
    assert "Traceback" not in key.stderr + imported.stderr
    assert (modeldeck_home / "config").read_text() == "mine"
    assert (modeldeck_home / "data" / "models").read_text() == "mine too"


class _HeldStreamHandler(StandInHandler):
    """A server of --upstream that sends the first words of an answer, then holds the rest until told."""

    protocol_version = "HTTP/1.1"
    release = threading.Event()

    def do_GET(self) -> None:
        self.send_json(200, {"object": "list", "data": [{"id": "held", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        first = json.dumps({"choices": [{"index": 0, "delta": {"content": "Hello"}}]})
        self.wfile.write(f"data: {first}\n\n".encode())
        self.wfile.flush()
        self.release.wait(60)


def test_the_service_dying_mid_answer_ends_the_answer_then_says_so_on_its_own_line(
    paths: AppPaths, tmp_path: Path
) -> None:
    """The error was printed on the line of the answer ("Hellomodeldeck: The chat stream ended: …")."""
    with serving(_HeldStreamHandler) as upstream:
        service = start_service_process(paths, tmp_path, "--upstream", f"held={upstream}")
        run = subprocess.Popen(
            [sys.executable, "-m", "app", "run", "held", "Say hello."], cwd=REPO, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert run.stdout is not None
        try:
            assert run.stdout.read(5) == "Hello"  # the answer has begun
            service.process.kill()
            out, err = run.communicate(timeout=60)
        finally:
            _HeldStreamHandler.release.set()
            if run.poll() is None:
                run.kill()
                run.wait()
            stop_service_process(service)
    assert run.returncode == 1, err
    assert "Hello" + out == "Hello\n", err  # the answer as far as it went, its line ended
    assert "Traceback" not in err
    assert err.startswith("modeldeck: The chat stream ended: ") and len(err.splitlines()) == 1, err
