"""Chat templates rendered in a worker process with time, output and memory limits: every hostile template gets
an answer that says what went wrong, and the next render is served by a fresh worker."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.service.gateway.templates import TemplateRenderer

MESSAGES = [{"role": "user", "content": "Hi"}]
CHAT = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}{% if add_generation_prompt %}<|a|>{% endif %}"
)
NESTED_LOOPS = "{% for i in range(99999) %}{% for j in range(99999) %}{{ '' }}{% endfor %}{% endfor %}"


@pytest.fixture
async def renderer() -> AsyncIterator[TemplateRenderer]:
    renderer = TemplateRenderer(time_limit_s=2.0)
    yield renderer
    await renderer.close()


async def test_a_chat_template_renders(renderer: TemplateRenderer) -> None:
    rendered = await renderer.render(CHAT, MESSAGES)
    assert rendered.text == "<|user|>Hi<|a|>" and rendered.problem is None


async def test_a_template_that_runs_forever_is_stopped_and_the_next_render_works(renderer: TemplateRenderer) -> None:
    rendered = await renderer.render(NESTED_LOOPS, MESSAGES)
    assert rendered.text is None and rendered.kind == "limit"
    assert rendered.problem == "it took longer than 2 s to render"
    assert (await renderer.render(CHAT, MESSAGES)).text == "<|user|>Hi<|a|>"


@pytest.mark.parametrize(
    ("template", "kind", "problem"),
    [
        ("{{ 'x' * 1000000000 }}", "limit", "renders more than 16777216 characters"),
        ("{% for i in range(99999) %}{{ 'x' * 1000 }}{% endfor %}", "limit", "renders more than"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "limit", "recurses too deeply"),
        ("{{ 10.0 ** 400 }}", "broken", "OverflowError"),
        ("{{ messages[0].content.__class__.__mro__ }}", "security", "the sandbox refused it"),
        ("{{ messages.append(1) }}", "security", "the sandbox refused it"),
        ("{{ raise_exception('Conversation roles must alternate') }}", "refused", "roles must alternate"),
        ("{% for %}", "broken", "TemplateSyntaxError"),
    ],
)
async def test_hostile_templates_get_a_clear_answer(
    renderer: TemplateRenderer, template: str, kind: str, problem: str
) -> None:
    rendered = await renderer.render(template, MESSAGES)
    assert rendered.text is None and rendered.kind == kind, rendered
    assert problem in (rendered.problem or ""), rendered
    assert (await renderer.render(CHAT, MESSAGES)).text == "<|user|>Hi<|a|>"
