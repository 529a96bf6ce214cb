"""Which llama-server slot a request goes to: the one that already holds the longest prefix of its prompt.

llama-server keeps each slot's KV cache after a request (`cache_prompt`), so a conversation whose next turn lands
on the slot that served its last turn only computes the new messages. Left to itself, the server picks among the
slots idle when a request arrives the one whose last prompt is most similar (over 10 % shared), else the least
recently used, and moves evicted prompts to a host-memory cache (`--cache-ram`). The gateway knows more: which
slots are about to be busy, which conversation a slot belongs to, and that a new conversation sharing only a
system prompt should not evict another's history. It remembers, per model and slot, the prompt it last sent
there, and names the slot (`id_slot`) in the upstream body.

The prompt is compared as text, message by message (a token prefix would need the engine's tokenizer on the hot
path): whole equal messages first, then characters of the first differing one. All of it is an in-memory lookup
over a handful of slots; the body is changed by splicing bytes, never re-serialized.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Shorter shared prefixes are chance ("You are a ..."), not a conversation's own history: no match.
MIN_MATCH_CHARS = 64
# A slot busy with another request is waited for only when it holds this much more of the prompt than the best
# free slot, and twice as much: computing that much again would cost more than the wait it saves. Never when
# another request already waits for it, so that no request queues behind a growing line.
BUSY_GAIN_CHARS = 2048


@dataclass(frozen=True, slots=True)
class SlotChoice:
    """The slot chosen for one request, and how much of the prompt it held (characters)."""

    model: str
    slot: int
    shared_chars: int
    generation: int  # the model's slot table this choice belongs to (a restarted engine starts a new one)

    def body(self, body: bytes) -> bytes:
        """`body` (a JSON object without `id_slot` or `cache_prompt`: the gateway refuses those fields) naming
        the slot. Spliced after the opening brace, so the rest of the bytes pass unchanged."""
        brace = body.index(b"{") + 1
        return b'%s"id_slot":%d,"cache_prompt":true,%s' % (body[:brace], self.slot, body[brace:])


@dataclass(slots=True)
class _Slot:
    index: int
    prompt: tuple[str, ...] = ()  # the prompt parts last sent here
    held_chars: int = 0  # their length
    busy: int = 0  # requests sent here and not finished
    last_used: int = 0  # when it was last chosen, on the router's own counter


@dataclass(slots=True)
class _ModelSlots:
    url: str
    slots: list[_Slot]
    generation: int
    choices: int = 0  # how many requests were routed, the clock of `last_used`


def prompt_parts(path: str, payload: dict[str, Any]) -> tuple[str, ...] | None:
    """The prompt of a validated request as comparable text parts, in the order the engine sees them; None for
    requests that are not routed (embeddings, several completion prompts at once)."""
    if path == "/v1/chat/completions":
        messages = payload.get("messages")
        if not isinstance(messages, list):
            return None
        tools = payload.get("tools")
        head = (json.dumps(tools, sort_keys=True),) if tools else ()  # templates render tools before the messages
        return head + tuple(_message_text(message) for message in messages)
    if path == "/v1/completions":
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        return (prompt,) if isinstance(prompt, str) else None
    return None


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return json.dumps(message, sort_keys=True)
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    if len(message) <= 2:  # role and content: the common case, no other field to render
        return f"{message.get('role')}\x00{text}"
    extra = {k: v for k, v in message.items() if k not in ("role", "content")}  # name, tool_calls, tool_call_id
    return f"{message.get('role')}\x00{text}\x00{json.dumps(extra, sort_keys=True)}"


def shared_chars(held: Sequence[str], prompt: Sequence[str]) -> int:
    """Characters at the start of `prompt` that `held` holds too: whole equal parts, then the common start of the
    first part that differs."""
    total = 0
    for old, new in zip(held, prompt, strict=False):
        if old == new:
            total += len(new)
            continue
        return total + _common_start(old, new)
    return total


def _common_start(a: str, b: str) -> int:
    """Length of the common start of two strings. Slices compared in C: lengths doubled while they match (two
    different prompts usually part within a few words), then halved within the last step."""
    limit = min(len(a), len(b))
    low, step = 0, 32
    while low < limit:
        high = min(limit, low + step)
        if a[low:high] != b[low:high]:
            break
        low, step = high, step * 2
    else:
        return limit
    while low < high - 1:  # a[:low] matches, a[:high] does not
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


class SlotRouter:
    """Per model, what each slot of its llama-server last received; picks a slot for each request."""

    def __init__(self) -> None:
        self._models: dict[str, _ModelSlots] = {}
        self._generations = 0

    def choose(self, model: str, url: str, slot_count: int, prompt: tuple[str, ...]) -> SlotChoice:
        """The slot for a request with this prompt to `model`'s engine at `url` serving `slot_count` slots; it is
        busy until `finished(choice)`. The longest shared prefix among free slots (ties and no match: the least
        recently used); a busy slot only for a much longer prefix, and only with nobody else waiting for it.

        A slot whose prompt parts from the request's sooner than half-way is no match: taking it would throw away
        more of another conversation (one that shares a long system prompt, say) than it saves, and that
        conversation would take it back on its next turn, each evicting the other."""
        table = self._table(model, url, slot_count)
        best_free: _Slot | None = None
        best_free_shared = -1
        best_busy: _Slot | None = None
        best_busy_shared = -1
        for slot in table.slots:
            shared = shared_chars(slot.prompt, prompt) if slot.prompt else 0
            if shared < MIN_MATCH_CHARS or slot.held_chars - shared > shared:
                shared = 0
            if slot.busy == 0:
                if shared > best_free_shared or (shared == best_free_shared and best_free is not None
                                                 and slot.last_used < best_free.last_used):  # fmt: skip
                    best_free, best_free_shared = slot, shared
            elif slot.busy == 1 and shared > best_busy_shared:
                best_busy, best_busy_shared = slot, shared
        chosen, shared = best_free, best_free_shared
        if best_busy is not None and (
            chosen is None
            or (best_busy_shared >= 2 * best_free_shared and best_busy_shared - best_free_shared >= BUSY_GAIN_CHARS)
        ):
            chosen, shared = best_busy, best_busy_shared
        if chosen is None:  # every slot has a line already (more requests than slots): the shortest line
            chosen = min(table.slots, key=lambda s: (s.busy, s.last_used))
            shared = shared_chars(chosen.prompt, prompt)
        table.choices += 1
        chosen.prompt, chosen.held_chars, chosen.last_used = prompt, sum(map(len, prompt)), table.choices
        chosen.busy += 1
        return SlotChoice(model, chosen.index, shared, table.generation)

    def finished(self, choice: SlotChoice) -> None:
        """The request routed by `choice` is over (answered, failed or abandoned): its slot is free again."""
        table = self._models.get(choice.model)
        if table is not None and table.generation == choice.generation:
            slot = table.slots[choice.slot]
            slot.busy = max(0, slot.busy - 1)

    def _table(self, model: str, url: str, slot_count: int) -> _ModelSlots:
        table = self._models.get(model)
        if table is None or table.url != url or len(table.slots) != slot_count:
            # A new engine process (restarted, or started with another plan): its slots start empty.
            self._generations += 1
            table = self._models[model] = _ModelSlots(url, [_Slot(i) for i in range(slot_count)], self._generations)
        return table


__all__ = ["SlotChoice", "SlotRouter", "prompt_parts", "shared_chars"]
