"""Remote routing in this process: a model of a remote `a` is `a/MODEL` here and `MODEL` there; the request goes
there with the remote's own key, and the answers name the model as the client asked for it.

The remote is a synthetic engine (tests/bench/synthetic_engine.py) served from the test's process: a real HTTP
server speaking the OpenAI protocol, which names itself `synth` in every answer as a remote server would name
its model; tests/support/synthetic.py says why a synthetic engine."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from app.paths import AppPaths
from app.service.remotes import RemoteRegistry
from engines.base import Capabilities
from tests.support.synthetic import SYNTHETIC_MODEL, SyntheticEngineAdapter, running_core, synthetic_server
from tests.support.waiting import wait_until

MESSAGES = [{"role": "user", "content": "Hi"}]
ENGINES = {"synthetic": SyntheticEngineAdapter(Capabilities(max_concurrency=1, stream_usage=True))}


async def test_a_remote_model_is_asked_for_by_its_remote_id_and_answered_by_ours(
    paths: AppPaths, tmp_path: Path
) -> None:
    asked = f"a/{SYNTHETIC_MODEL}"
    async with synthetic_server() as remote_url, running_core(paths, [], ENGINES) as core:
        async with aiohttp.ClientSession() as session:
            await RemoteRegistry(core.manager, paths, session).add("a", remote_url, None)
        assert asked in {model.id async for model in core.openai.models.list()}
        route = core.manager.route(asked)
        assert (route.upstream_model, route.remote, route.external, route.url) == (SYNTHETIC_MODEL, "a", True,
                                                                                  remote_url)  # fmt: skip

        whole = await core.openai.chat.completions.create(model=asked, messages=MESSAGES, max_tokens=3)
        assert whole.model == asked and len((whole.choices[0].message.content or "").split()) == 3
        text = await core.openai.completions.create(model=asked, prompt="x", max_tokens=2)
        assert text.model == asked

        stream = await core.openai.chat.completions.create(
            model=asked, messages=MESSAGES, max_tokens=40, stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        assert {chunk.model for chunk in chunks} == {asked}
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 40
        assert len("".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split()) == 40

        await wait_until(lambda: len(core.records()) == 3, "three requests recorded")
        assert {(r["model"], r["status"]) for r in core.records()} == {(asked, 200)}


async def test_a_local_model_goes_to_its_engine_under_its_own_id(paths: AppPaths, tmp_path: Path) -> None:
    from tests.support.synthetic import synthetic_spec

    async with running_core(paths, [synthetic_spec(tmp_path, "m")], ENGINES) as core:
        route = core.manager.route("m")
        assert route.url is None and route.remote is None and not route.renamed  # not started yet
        await core.openai.completions.create(model="m", prompt="x", max_tokens=1)
        route = core.manager.route("m")
        assert route.url is not None and route.url.startswith("http://127.0.0.1:") and not route.external
        assert route.bearer == core.manager.internal_key and route.queue.capacity == 1
