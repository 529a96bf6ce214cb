"""Slot choice for llama-server: the slot holding a conversation's earlier turns, free slots before busy ones.

Pure in-memory logic: the real engine's side (the turns landing where chosen, its cache counts) is in
test_slot_routing_service.py."""

from __future__ import annotations

import json
import random

import pytest

from app.service.gateway.slot_router import BUSY_GAIN_CHARS, MIN_MATCH_CHARS, SlotRouter, prompt_parts, shared_chars

URL = "http://127.0.0.1:9000"
SYSTEM = "You are a careful assistant. " * 20  # well over MIN_MATCH_CHARS


def chat(*messages: tuple[str, str], system: str = SYSTEM) -> tuple[str, ...]:
    payload = {"messages": [{"role": "system", "content": system}, *({"role": r, "content": c} for r, c in messages)]}
    parts = prompt_parts("/v1/chat/completions", payload)
    assert parts is not None
    return parts


def test_shared_chars_counts_whole_parts_then_the_common_start_of_the_first_difference() -> None:
    assert shared_chars(("abc", "defg"), ("abc", "defg", "h")) == 7
    assert shared_chars(("abc", "dexx"), ("abc", "deyy")) == 5
    assert shared_chars(("abc",), ("xbc",)) == 0
    assert shared_chars((), ("abc",)) == 0
    long = "w" * 10_000
    assert shared_chars((long + "a",), (long + "b",)) == 10_000
    rng = random.Random(7)
    for _ in range(500):  # against the obvious character loop, at every length and split point
        common = "".join(rng.choices("ab", k=rng.randrange(0, 300)))
        a = common + "".join(rng.choices("ab", k=rng.randrange(0, 50)))
        b = common + "".join(rng.choices("ab", k=rng.randrange(0, 50)))
        expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert shared_chars((a,), (b,)) == expected, (a, b)


def test_a_conversation_returns_to_its_slot_while_others_take_turns() -> None:
    router = SlotRouter()
    systems = [f"Conversation {n}: " + SYSTEM for n in range(3)]
    history: list[list[tuple[str, str]]] = [[] for _ in systems]
    slot_of: dict[int, int] = {}
    for turn in range(4):
        for conversation, system in enumerate(systems):
            history[conversation].append(("user", f"question {turn} of {conversation}"))
            choice = router.choose("m", URL, 4, chat(*history[conversation], system=system))
            router.finished(choice)
            if turn == 0:
                assert choice.shared_chars == 0
                slot_of[conversation] = choice.slot
            else:
                assert choice.slot == slot_of[conversation]
                assert choice.shared_chars >= len(system)
            history[conversation].append(("assistant", f"answer {turn} of {conversation}"))
    assert sorted(slot_of.values()) == [0, 1, 2]  # three conversations, three slots: none overwrites another


def test_no_match_goes_to_the_least_recently_used_free_slot() -> None:
    router = SlotRouter()
    chosen = []
    for n in range(3):
        choice = router.choose("m", URL, 2, chat(("user", f"hello {n}"), system=f"{n}" * 100))
        router.finished(choice)
        chosen.append(choice.slot)
    assert chosen == [0, 1, 0]


def test_a_new_conversation_sharing_a_system_prompt_leaves_a_longer_history_alone() -> None:
    router = SlotRouter()
    history = [("user", "tell me a long story"), ("assistant", "once " * 200), ("user", "and then?")]
    first = router.choose("m", URL, 2, chat(*history))
    router.finished(first)
    other = router.choose("m", URL, 2, chat(("user", "a different question")))
    router.finished(other)
    assert other.slot != first.slot and other.shared_chars == 0  # its history is longer than the shared part
    back = router.choose("m", URL, 2, chat(*history, ("assistant", "then"), ("user", "more")))
    assert back.slot == first.slot  # still there for the next turn
    router.finished(back)
    # A short history beside the shared system prompt: reusing the prompt is worth more than that history.
    router.finished(router.choose("m", URL, 2, chat(("user", "hi"))))
    again = router.choose("m", URL, 2, chat(("user", "hello")))
    assert again.shared_chars >= len(SYSTEM)


def test_a_chance_overlap_shorter_than_the_minimum_is_no_match() -> None:
    router = SlotRouter()
    first = router.choose("m", URL, 2, ("x" * (MIN_MATCH_CHARS - 1) + "a",))
    router.finished(first)
    second = router.choose("m", URL, 2, ("x" * (MIN_MATCH_CHARS - 1) + "b",))
    assert second.slot != first.slot and second.shared_chars == 0


def test_a_busy_slot_is_not_chosen_when_a_free_one_holds_a_comparable_prefix() -> None:
    router = SlotRouter()
    base = chat(("user", "u" * 100))
    held = router.choose("m", URL, 2, base)  # stays busy
    router.finished(free := router.choose("m", URL, 2, base[:1]))  # the other slot: the system prompt only
    assert free.slot != held.slot
    choice = router.choose("m", URL, 2, (*base, "assistant\x00a", "user\x00next"))
    assert choice.slot == free.slot  # the busy slot holds only 100 more characters: not worth the wait


def test_a_busy_slot_is_waited_for_only_for_a_much_longer_prefix_and_never_by_two() -> None:
    router = SlotRouter()
    long_history = chat(("user", "h" * (2 * BUSY_GAIN_CHARS)))
    held = router.choose("m", URL, 3, long_history)  # busy
    new = (*long_history, "user\x00more")
    first = router.choose("m", URL, 3, new)
    assert first.slot == held.slot and first.shared_chars >= 2 * BUSY_GAIN_CHARS
    second = router.choose("m", URL, 3, (*new, "user\x00again"))  # the slot already has one waiting
    assert second.slot != held.slot


def test_every_slot_busy_takes_the_shortest_line() -> None:
    router = SlotRouter()
    choices = [router.choose("m", URL, 2, (f"{n}" * 100,)) for n in range(3)]
    assert sorted(c.slot for c in choices) == [0, 0, 1]
    for choice in choices:
        router.finished(choice)
    again = router.choose("m", URL, 2, ("2" * 100,))
    assert again.shared_chars == 100


def test_a_restarted_engine_starts_with_empty_slots_and_old_choices_do_not_touch_them() -> None:
    router = SlotRouter()
    old = router.choose("m", URL, 2, ("a" * 100,))
    renewed = router.choose("m", "http://127.0.0.1:9001", 2, ("a" * 100,))
    assert renewed.shared_chars == 0
    router.finished(old)  # from the old engine: must not free the new engine's busy slot
    other = router.choose("m", "http://127.0.0.1:9001", 2, ("a" * 100,))
    assert other.slot != renewed.slot


def test_the_body_names_the_slot_and_keeps_every_other_byte() -> None:
    router = SlotRouter()
    choice = router.choose("m", URL, 2, ("p" * 100,))
    body = b'\xef\xbb\xbf {"model": "m", "prompt": "{x}", "stream": true}'
    routed = choice.body(body)
    assert json.loads(routed.decode("utf-8-sig")) == {
        "id_slot": choice.slot, "cache_prompt": True, "model": "m", "prompt": "{x}", "stream": True,
    }  # fmt: skip
    assert routed.endswith(body[body.index(b"{") + 1 :])


@pytest.mark.parametrize(
    ("path", "payload", "expected"),
    [
        ("/v1/completions", {"prompt": "abc"}, ("abc",)),
        ("/v1/completions", {"prompt": ["abc"]}, ("abc",)),
        ("/v1/completions", {"prompt": ["a", "b"]}, None),  # several prompts run on several slots at once
        ("/v1/embeddings", {"input": "abc"}, None),
        ("/v1/chat/completions", {"messages": "not a list"}, None),
    ],
)
def test_prompt_parts_of_each_route(path: str, payload: dict[str, object], expected: tuple[str, ...] | None) -> None:
    assert prompt_parts(path, payload) == expected


def test_tools_and_message_fields_beyond_text_are_part_of_the_prompt() -> None:
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    plain = prompt_parts("/v1/chat/completions", {"messages": messages})
    with_tools = prompt_parts("/v1/chat/completions", {"messages": messages, "tools": [{"type": "function"}]})
    named = prompt_parts("/v1/chat/completions", {"messages": [{**messages[0], "name": "ann"}]})
    assert plain is not None and with_tools is not None and named is not None
    assert len(with_tools) == len(plain) + 1 and with_tools[1:] == plain
    assert named != plain
