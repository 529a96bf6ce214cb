"""The service build's sdist download: real pip against a loopback index that never answers (a Cancel kills pip at
once, leaving no process) or answers 404 (a BuildError with pip's words); a downloaded sdist is not fetched again."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.installs.llama_server_build import BuildError
from app.installs.sdist_download import download_sdist, sdist_path
from app.task import Stopped, TaskState
from tests.support.standin_http import StandInHandler, serving

PIP_TIMEOUT_S = 120  # pip's wait for each answer: far longer than the test waits before it cancels


@pytest.fixture
def silent_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """A package index that accepts connections and never answers; the event is set once pip has connected."""
    connected = threading.Event()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return  # the fixture closed the socket
            held.append(client)
            connected.set()

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.getsockname()[1]}/simple")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", str(PIP_TIMEOUT_S))
    monkeypatch.setenv("PIP_RETRIES", "0")
    yield connected
    server.close()
    for client in held:
        client.close()


class _NotFound(StandInHandler):
    def do_GET(self) -> None:
        self.send_error(404)


@pytest.fixture
def empty_index(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A package index that knows no package."""
    with serving(_NotFound) as url:
        monkeypatch.setenv("PIP_INDEX_URL", f"{url}/simple")
        monkeypatch.setenv("PIP_RETRIES", "0")
        yield


def test_a_cancel_kills_pip_while_it_waits_for_the_index(tmp_path: Path, silent_index: threading.Event) -> None:
    state = TaskState()
    outcome: list[BaseException] = []

    def download() -> None:
        try:
            download_sdist(tmp_path / "sdists", "9.9.9", state)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=download)
    worker.start()
    try:
        assert silent_index.wait(PIP_TIMEOUT_S / 2), f"pip never asked the index: {outcome}"
    finally:
        cancelled_at = time.monotonic()
        state.cancel()
        worker.join(timeout=30)
    assert not worker.is_alive() and time.monotonic() - cancelled_at < PIP_TIMEOUT_S / 4
    assert len(outcome) == 1 and isinstance(outcome[0], Stopped), outcome
    assert psutil.Process().children(recursive=True) == [], "pip went with the cancel"
    assert list((tmp_path / "sdists").iterdir()) == []  # nothing kept of a download cut short


def test_an_index_without_the_package_is_a_build_error_in_pips_words(tmp_path: Path, empty_index: None) -> None:
    with pytest.raises(BuildError) as failed:
        download_sdist(tmp_path / "sdists", "9.9.9", TaskState())
    message = str(failed.value)
    assert "llama_cpp_python==9.9.9" in message and "No matching distribution" in message


def test_a_downloaded_sdist_is_used_again(tmp_path: Path, empty_index: None) -> None:
    """The index knows nothing: the sdist already there is returned without asking it."""
    kept = sdist_path(tmp_path, "9.9.9")
    kept.write_bytes(gzip.compress(b"an sdist from an earlier build"))
    assert download_sdist(tmp_path, "9.9.9", TaskState()) == kept


def test_a_damaged_sdist_is_downloaded_again(tmp_path: Path, empty_index: None) -> None:
    """A kept sdist that ends early (a copy cut short, a disk error) is not built from: pip is asked again (here
    an index without the package answers) and the damaged file is gone."""
    kept = sdist_path(tmp_path, "9.9.9")
    kept.write_bytes(gzip.compress(b"an sdist from an earlier build" * 1000)[:-100])
    with pytest.raises(BuildError, match="No matching distribution"):
        download_sdist(tmp_path, "9.9.9", TaskState())
    assert not kept.exists()
