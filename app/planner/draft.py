"""Which model may draft for which in speculative decoding (llama-server's `--model-draft`), and what it costs.

A draft proposes tokens that the target model checks in one batch: its token ids must mean what the target's mean,
so only a model with the target's vocabulary, token for token, and the same special tokens can draft for it. Both
GGUF headers say so (`tokenizer.ggml.*`); the token lists are compared by digest, read with the header's bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.planner.facts import facts_from_gguf
from app.planner.memory import MissingFacts, llama_cpp_memory
from engines.gguf import GGUFInfo, read_gguf_info

TOKENS = "tokenizer.ggml.tokens"
_SPECIAL = {
    "tokenizer.ggml.model": "tokenizer",
    "tokenizer.ggml.bos_token_id": "start token",
    "tokenizer.ggml.eos_token_id": "end token",
    "tokenizer.ggml.eot_token_id": "end-of-turn token",
    "tokenizer.ggml.padding_token_id": "padding token",
    "tokenizer.ggml.unknown_token_id": "unknown token",
}
MIB = 1024 * 1024


class DraftRefused(ValueError):
    """The model cannot draft for the target; the message says why in a sentence."""


@dataclass(frozen=True)
class DraftChoice:
    """A draft checked against its target: its file, the memory it adds at the target's context, and why."""

    model_id: str
    path: Path
    layers: int
    added_bytes: int
    reason: str


def vocabulary_header(path: Path) -> GGUFInfo:
    """The GGUF header with its token list's digest (blocking). Raises GGUFError."""
    return read_gguf_info(path, frozenset({TOKENS}))


def vocabulary_mismatch(target: GGUFInfo, draft: GGUFInfo) -> str | None:
    """What differs between the two vocabularies, in words; None when they are the same."""
    sizes = target.array_lengths.get(TOKENS), draft.array_lengths.get(TOKENS)
    if None in sizes:
        return "one of them has no token list in its GGUF header"
    if sizes[0] != sizes[1]:
        return f"their vocabularies differ: {sizes[1]} tokens against the model's {sizes[0]}"
    if target.array_digests.get(TOKENS) != draft.array_digests.get(TOKENS):
        return f"their vocabularies differ: both have {sizes[0]} tokens, but not the same ones"
    for key, name in _SPECIAL.items():
        if target.metadata.get(key) != draft.metadata.get(key):
            return f"their {name}s differ ({draft.metadata.get(key)!r} against {target.metadata.get(key)!r})"
    return None


def choose_draft(
    target_id: str, target: GGUFInfo, draft_id: str, draft: GGUFInfo, context: int, draft_max: int = 8
) -> DraftChoice:
    """The draft for the target at `context` tokens; raises DraftRefused when its vocabulary is another one. Both
    headers from `vocabulary_header`.

    The draft adds its weights, a KV cache as long as the target's, and a compute buffer for the few tokens it
    decodes a step (it needs logits for those only): for the bundled model at 2048 tokens, 144 MB predicted where
    llama-server's resident memory grew by 162 MB with it as its own draft."""
    mismatch = vocabulary_mismatch(target, draft)
    if mismatch is not None:
        raise DraftRefused(f"{draft_id} cannot draft for {target_id}: {mismatch}.")
    facts = facts_from_gguf(draft)
    try:
        estimate = llama_cpp_memory(facts, context, batch=2 * draft_max, runtime=0)  # in the target's process
        added = estimate.ram + estimate.vram
    except MissingFacts:
        added = draft.tensor_bytes
    reason = f"draft {draft_id} for {target_id}: same vocabulary, +{added / MIB:.0f} MB"
    return DraftChoice(draft_id, draft.path, facts.layers or 0, added, reason)
