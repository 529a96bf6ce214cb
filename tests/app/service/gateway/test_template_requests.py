"""Hostile chat templates in real model files, served by llama-cpp-python (the engine whose stream usage ModelDeck
adds, rendering the template itself): the gateway renders them off its event loop, within limits, and a
template the engine's sandbox refuses is answered as what it is, not as the engine's bare 500.

The model files are copies of the bundled model with the chat template replaced by one of the same length, so
that every offset in the file stays valid."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import openai
import pytest

from app.paths import AppPaths
from engines.gguf import read_gguf_info
from tests.support.service import RunningService, start_service_process, stop_service_process
from tests.support.waiting import wait_for

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{{ '<|im_start|>assistant\\n' }}"
)
# eos_token is the engine's real one, and empty in ModelDeck's render: only ModelDeck's render loops 10**10 times
HANGS_IN_MODELDECK = (
    "{% if eos_token == '' %}{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"
    "{% endif %}" + CHATML
)
UNSAFE = "{{ messages.append(1) }}" + CHATML
REFUSING = "{{ raise_exception('This model only answers a system prompt first.') }}"
FAILS_IN_THE_ENGINE = "{% if eos_token != '' %}{{ raise_exception('Not in ModelDeck.') }}{% endif %}" + CHATML


def model_with_template(bundled_gguf: Path, models_dir: Path, model_id: str, template: str) -> None:
    original = read_gguf_info(bundled_gguf).metadata["tokenizer.chat_template"]
    assert isinstance(original, str)
    padded = template + "{#" + " " * (len(original.encode()) - len(template.encode()) - 4) + "#}"
    assert len(padded.encode()) == len(original.encode())
    data = bundled_gguf.read_bytes()
    assert data.count(original.encode()) == 1
    models_dir.mkdir(parents=True, exist_ok=True)
    (models_dir / f"{model_id}.gguf").write_bytes(data.replace(original.encode(), padded.encode()))


def start_on_llama_cpp(service: RunningService, model_id: str) -> None:
    started = service.client.start_model(model_id, wait=True, overrides={"engine": "llama-cpp-python"})
    assert started["state"] == "ready", service.client.logs(model_id)


def test_templates_render_off_the_loop_and_the_engines_refusals_are_explained(
    paths: AppPaths, tmp_path: Path, bundled_gguf: Path
) -> None:
    for model_id, template in (("hangs", HANGS_IN_MODELDECK), ("unsafe", UNSAFE), ("refusing", REFUSING)):
        model_with_template(bundled_gguf, paths.models_dir, model_id, template)
    service = start_service_process(paths, tmp_path)
    try:
        client = service.openai_client()
        start_on_llama_cpp(service, "hangs")
        # A stream whose usage ModelDeck adds: its prompt is rendered with the template that loops forever.
        outcome: dict[str, Any] = {}

        def stream() -> None:
            chunks = list(client.chat.completions.create(
                model="hangs", max_tokens=4, stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": "Hi"}],
            ))  # fmt: skip
            outcome["usage"] = chunks[-1].usage

        streamer = threading.Thread(target=stream)
        streamer.start()
        # While that render runs (until the worker is killed at its time limit), the control API and the gateway
        # answer; rendered on the event loop, it held both for hours.
        answered = 0
        while streamer.is_alive():
            assert service.client.health()["status"] == "ok"
            assert [m.id for m in client.models.list().data]
            answered += 1
        assert answered > 0
        usage = outcome["usage"]
        assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens is None
        assert "prompt tokens not counted: the model's chat template failed: it took longer than" in service.output()
        record = wait_for(lambda: [r for r in service.client.requests() if r["model"] == "hangs"], 30, "the record")
        assert record[-1]["status"] == 200
        service.client.stop_model("hangs")

        # The template's own refusal of the conversation is the client's to fix: a 400 that says so.
        start_on_llama_cpp(service, "refusing")
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="refusing", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        assert refused.value.body["code"] == "chat_template_error"  # type: ignore[index]
        assert "refused these messages: This model only answers a system prompt first." in refused.value.message
        service.client.stop_model("refusing")

        # A template the engine's sandbox refuses: the engine's bare 500 becomes one that says what and why.
        start_on_llama_cpp(service, "unsafe")
        with pytest.raises(openai.InternalServerError) as unusable:
            client.chat.completions.create(model="unsafe", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
        assert unusable.value.body["code"] == "chat_template_error"  # type: ignore[index]
        assert "chat template cannot be used: the sandbox refused it" in unusable.value.message
        assert "/v1/completions" in unusable.value.message
        assert service.client.health()["status"] == "ok"
        assert "Traceback" not in service.output()
    finally:
        stop_service_process(service)


def test_a_stream_whose_template_fails_is_an_error_the_client_sees(
    paths: AppPaths, tmp_path: Path, bundled_gguf: Path
) -> None:
    """llama-cpp-python says 200 to a stream before it renders the chat template, and ends it empty when that fails:
    the client got an empty answer and no error."""
    for model_id, template in (("refusing", REFUSING), ("engine-fails", FAILS_IN_THE_ENGINE)):
        model_with_template(bundled_gguf, paths.models_dir, model_id, template)
    service = start_service_process(paths, tmp_path)
    try:
        client = service.openai_client()
        messages: Any = [{"role": "user", "content": "Hi"}]
        start_on_llama_cpp(service, "refusing")
        with pytest.raises(openai.BadRequestError) as whole:
            client.chat.completions.create(model="refusing", max_tokens=4, messages=messages)
        with pytest.raises(openai.BadRequestError) as streamed:
            list(client.chat.completions.create(model="refusing", max_tokens=4, messages=messages, stream=True))
        assert streamed.value.body == whole.value.body  # the same explanation, streamed or not
        assert streamed.value.body["code"] == "chat_template_error"  # type: ignore[index]
        service.client.stop_model("refusing")

        # A template that renders in ModelDeck but fails in the engine: the gateway cannot say what failed.
        start_on_llama_cpp(service, "engine-fails")
        with pytest.raises(openai.APIStatusError) as failed:
            list(client.chat.completions.create(model="engine-fails", max_tokens=4, messages=messages, stream=True))
        assert failed.value.status_code == 502
        assert "ended the stream without sending anything" in failed.value.message
        assert "GET /api/models/engine-fails/logs" in failed.value.message
        wait_for(lambda: len([r for r in service.client.requests() if r["stream"]]) == 2, 30, "the records")
        assert [r["status"] for r in service.client.requests() if r["stream"]] == [400, 502]
        assert "Traceback" not in service.output()
    finally:
        stop_service_process(service)
