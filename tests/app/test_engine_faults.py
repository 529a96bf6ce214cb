"""llama-server (the real build of installers/test.sh, on the bundled model) SIGKILLed in the middle of streams:
each client's stream ends with an error event, not a silent cut that looks like a finished answer, and the engine
is restarted and serves the next request. (The same for llama-cpp-python: tests/app/test_gateway.py.)"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import openai
import pytest

from app.hub.library import BUNDLED_ID
from app.installs.available import LLAMA_SERVER_ENV
from app.paths import AppPaths
from tests.app.test_llama_server_service import model_state
from tests.support.service import start_service_process, stop_service_process, wait_for

STREAMS = 2


def test_llama_server_killed_mid_stream_ends_every_stream_with_an_error_and_restarts(
    paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, llama_server_binary: Path
) -> None:
    monkeypatch.setenv(LLAMA_SERVER_ENV, str(llama_server_binary))
    service = start_service_process(paths, tmp_path)
    try:
        started = service.client.start_model(
            BUNDLED_ID, wait=True, overrides={"engine": "llama-server", "parallel": STREAMS}
        )
        assert started["state"] == "ready", service.client.logs(BUNDLED_ID)
        received = [threading.Event() for _ in range(STREAMS)]
        outcomes: dict[int, BaseException | str] = {}

        def stream(index: int) -> None:
            pieces = []
            try:
                for chunk in service.openai_client().chat.completions.create(
                    model=BUNDLED_ID, messages=[{"role": "user", "content": f"Tell a long story, number {index}."}],
                    max_tokens=4000, stream=True,
                ):  # fmt: skip
                    if chunk.choices and chunk.choices[0].delta.content:
                        pieces.append(chunk.choices[0].delta.content)
                        received[index].set()
                outcomes[index] = "ended without an error: " + "".join(pieces)[-80:]
            except openai.APIError as exc:
                outcomes[index] = exc

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
        for thread in threads:
            thread.start()
        assert all(event.wait(120) for event in received), "the streams did not start"
        os.kill(int(started["pid"]), signal.SIGKILL)
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(outcomes) == list(range(STREAMS))
        for outcome in outcomes.values():
            assert isinstance(outcome, openai.APIError), outcome
            assert "engine" in str(outcome).lower(), outcome
        restarted = wait_for(
            lambda: (m := model_state(service))["state"] == "ready" and m["restarts"] == 1 and m,
            90,
            "the restart",
        )
        assert restarted["pid"] != started["pid"] and restarted["engine"] == "llama-server"
        answer = service.openai_client().chat.completions.create(
            model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
        )
        assert answer.choices[0].message.content
    finally:
        stop_service_process(service)
