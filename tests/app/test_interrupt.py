"""Ctrl-C ends every long command promptly, whatever it waits on: real `modeldeck` processes, each interrupted while
it waits (a stalled download, a stream in flight, a benchmark, a compiler that ignores signals). The issue asks for
2 s; the bound here is 5 s so that a busy machine does not fail the test, and each measured time is printed."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import httpx
import openai
import psutil

from app.hub.cache import RepoCache
from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.app.cli.test_hub_cli import env_for
from tests.app.installs.test_llama_server_build import tiny_project
from tests.support.hub_server import FakeHub, add_repo, sha256
from tests.support.service import REPO, start_service_process, stop_service_process
from tests.support.waiting import wait_for

BOUND_S = 5.0


def modeldeck(*args: str, env: dict[str, str] | None = None, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app", *args], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=REPO, env=env or {**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip


def interrupt(process: subprocess.Popen[bytes], what: str) -> tuple[int, float]:
    """Send SIGINT as a terminal's Ctrl-C does; the exit status and the seconds it took to exit."""
    started = time.monotonic()
    process.send_signal(signal.SIGINT)
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"{what} did not exit within 30 s of Ctrl-C") from None
    took = time.monotonic() - started
    print(f"{what}: exited {took:.2f} s after Ctrl-C")
    return code, took


def test_ctrl_c_ends_a_stalled_pull(hub: FakeHub, gguf_bytes: bytes, tmp_path: Path) -> None:
    """The server stalls mid-file: the pull waits in a read with a 30 s timeout."""
    add_repo(hub, "org/smol-GGUF", {"smol-Q4_1.gguf": gguf_bytes})
    hub.faults.stall_after = 5_000_000
    hf_home = tmp_path / "hf-home"
    partial = RepoCache(hf_home / "hub", "org/smol-GGUF").incomplete(sha256(gguf_bytes))
    pull = modeldeck("pull", "org/smol-GGUF", env=env_for(hub.url, hf_home), log=tmp_path / "pull.log")
    wait_for(lambda: partial.exists() and partial.stat().st_size == 5_000_000, 60, "the stalled download")
    code, took = interrupt(pull, "pull")
    hub.faults.stall_after = None
    assert code == 130 and took < BOUND_S
    assert partial.stat().st_size == 5_000_000, "the partial is kept for the next pull"


def test_ctrl_c_ends_serve_with_a_stream_in_flight(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    engine = psutil.Process(service.model()["pid"])
    streaming = threading.Event()

    def stream() -> None:
        try:
            for _chunk in service.openai_client().chat.completions.create(
                model=BUNDLED_ID, messages=[{"role": "user", "content": "Tell a long story."}], max_tokens=4000,
                stream=True,
            ):  # fmt: skip
                streaming.set()
        except (openai.APIError, httpx.HTTPError):  # the stop cuts the stream: that is what this test does
            return

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    try:
        assert streaming.wait(60), "no token streamed"
        code, took = interrupt(service.process, "serve")
        assert code in (0, 128 + signal.SIGINT) and took < BOUND_S
        _, alive = psutil.wait_procs([engine], timeout=5)
        assert not alive, "the engine outlived the service"
        assert not paths.service_file.exists()
    finally:
        stop_service_process(service)
        reader.join(timeout=30)


def test_ctrl_c_ends_a_benchmark(paths: AppPaths, tmp_path: Path) -> None:
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID)
    try:
        log = tmp_path / "bench.log"
        bench = modeldeck(
            "bench", BUNDLED_ID, "--concurrency", "2", "--requests", "200", "--output-tokens", "64",
            "--progress-jsonl", log=log,
        )  # fmt: skip
        wait_for(lambda: "request" in log.read_text(), 120, "the benchmark's first request")
        code, took = interrupt(bench, "bench")
        assert code == 130 and took < BOUND_S
    finally:
        stop_service_process(service)


SLOW_STEP = """
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/slow.h COMMAND sh ${CMAKE_SOURCE_DIR}/slow.sh ${CMAKE_BINARY_DIR}/slow.h)
add_custom_target(slow DEPENDS ${CMAKE_BINARY_DIR}/slow.h)
add_dependencies(part1 slow)
"""
SLOW_SH = """trap '' INT TERM
echo $$ > {marker}
sleep 600
touch "$1"
"""


def test_ctrl_c_ends_an_engine_build_and_its_compiler(tmp_path: Path) -> None:
    """A build step that ignores SIGINT and SIGTERM stands for a compiler deep in a big file: the command ends and
    takes the step with it. (Interrupting Thread.join had left the build thread running unseen: the command
    exited and the step went on.)"""
    marker = tmp_path / "step.pid"
    project = tiny_project(tmp_path / "project", extra=SLOW_STEP)
    (project / "slow.sh").write_text(SLOW_SH.format(marker=marker))
    sdist = tmp_path / "llama_cpp_python-9.9.9.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(project, arcname="llama_cpp_python-9.9.9/vendor/llama.cpp")
        info = b"Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 9.9.9\n"
        entry = tarfile.TarInfo("llama_cpp_python-9.9.9/PKG-INFO")
        entry.size = len(info)
        archive.addfile(entry, io.BytesIO(info))
    build = modeldeck(
        "engines", "build", "llama-server", "--source", str(sdist), "--dest", str(tmp_path / "builds"),
        "--backend", "cpu", log=tmp_path / "build.log",
    )  # fmt: skip
    wait_for(lambda: marker.exists() and marker.read_text().strip(), 120, "the slow build step")
    step = psutil.Process(int(marker.read_text()))
    code, took = interrupt(build, "engines build")
    _, alive = psutil.wait_procs([step], timeout=5)
    for survivor in alive:
        survivor.kill()
    assert not alive, "the build step outlived the interrupted command"
    assert code == 130 and took < BOUND_S
    said = (tmp_path / "build.log").read_text()
    assert "build cancelled" in said or "interrupted" in said  # its own cancel, or the deadline on a busy machine
