"""No secret leaves its place: the real service, a real engine on the bundled model and a real `--upstream` server.

The engine starts from an allow-listed environment (no gateway key, no remote keys, no Hub token) with no key on its
command line, and an `--upstream` server, which runs outside ModelDeck, never receives the engines' internal key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.hub.library import BUNDLED_ID
from app.paths import AppPaths
from tests.support.service import start_service_process, stop_service_process
from tests.support.standin_http import StandInHandler, serving

SECRETS = {"HF_TOKEN": "hf_do_not_leak", "MODELDECK_REMOTE_KEY_GPUBOX": "sk-remote-do-not-leak"}


class _Recorder(StandInHandler):
    """An OpenAI-compatible server that answers every chat completion with one word and records its headers."""

    seen: list[str | None]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).seen.append(self.headers.get("Authorization"))
        self.send_json(200, {
            "id": "x", "object": "chat.completion", "created": 0, "model": "ext",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })  # fmt: skip


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    with serving(handler) as url:
        yield url, seen


def test_engines_and_upstreams_get_no_secret_of_the_service(
    paths: AppPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upstream: tuple[str, list[str | None]]
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    url, seen = upstream
    service = start_service_process(paths, tmp_path, "--model", BUNDLED_ID, "--upstream", f"ext={url}")
    try:
        model = service.model()
        assert model["state"] == "ready", model["message"]
        engine = psutil.Process(model["pid"])
        environment = engine.environ()
        leaked = {name for name in (*SECRETS, "MODELDECK_API_KEY") if name in environment}
        assert not leaked, f"the engine inherited {sorted(leaked)}"
        assert service.api_key not in " ".join(engine.cmdline())
        assert not any("key" in arg.lower() for arg in engine.cmdline()), engine.cmdline()
        # The engine still works with what it was given.
        reply = service.openai_client().completions.create(model=BUNDLED_ID, prompt="Hello", max_tokens=4)
        assert reply.choices[0].text

        answer = service.openai_client().chat.completions.create(
            model="ext", messages=[{"role": "user", "content": "hello"}], max_tokens=4
        )
        assert answer.choices[0].message.content == "hi"
        assert seen == [None], f"the --upstream server was sent {seen}"  # no key was configured for it
    finally:
        stop_service_process(service)
