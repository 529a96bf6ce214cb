"""llama-server (the real build of installers/test.sh, on the bundled model) SIGKILLed in the middle of streams:
each client's stream ends with an error event, not a silent cut that looks like a finished answer, and the engine
is restarted and serves the next request. (The same for llama-cpp-python: tests/app/service/gateway/test_gateway.py.)"""

from __future__ import annotations

import os
import signal
import threading

import openai

from app.hub.library import BUNDLED_ID
from tests.support.service import StartService
from tests.support.waiting import wait_for

STREAMS = 2


def test_llama_server_killed_mid_stream_ends_every_stream_with_an_error_and_restarts(
    llama_server_service: StartService,
) -> None:
    service = llama_server_service()
    started = service.start_on_llama_server(STREAMS)
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
        lambda: (m := service.model())["state"] == "ready" and m["restarts"] == 1 and m,
        90,
        "the restart",
    )
    assert restarted["pid"] != started["pid"] and restarted["engine"] == "llama-server"
    answer = service.openai_client().chat.completions.create(
        model=BUNDLED_ID, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
    )
    assert answer.choices[0].message.content
