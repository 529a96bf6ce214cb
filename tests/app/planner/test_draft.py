"""Which model may draft for which: the bundled model for itself (the same vocabulary, token for token), never a
copy of it with one token changed, nor one whose vocabulary size or special tokens differ; and what a draft adds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.planner.draft import TOKENS, DraftRefused, choose_draft, vocabulary_header, vocabulary_mismatch
from tests.support.other_vocabulary import copy_with_other_vocabulary


def test_a_model_with_the_same_vocabulary_may_draft(bundled_gguf: Path, tmp_path: Path) -> None:
    target, draft = vocabulary_header(bundled_gguf), vocabulary_header(bundled_gguf)
    assert target.array_digests[TOKENS] and target.array_lengths[TOKENS] == 49152
    choice = choose_draft("big", target, "small", draft, 2048)
    assert choice.path == bundled_gguf and choice.layers == 30
    # Its weights (about the file) and its KV cache at the target's context.
    assert bundled_gguf.stat().st_size < choice.added_bytes < 3 * bundled_gguf.stat().st_size
    assert choice.reason == f"draft small for big: same vocabulary, +{choice.added_bytes / 2**20:.0f} MB"
    assert choose_draft("big", target, "small", draft, 8192).added_bytes > choice.added_bytes  # a longer KV cache


def test_another_vocabulary_is_refused_with_a_sentence(bundled_gguf: Path, tmp_path: Path) -> None:
    other = vocabulary_header(copy_with_other_vocabulary(bundled_gguf, tmp_path / "other.gguf"))
    target = vocabulary_header(bundled_gguf)
    with pytest.raises(DraftRefused) as refused:
        choose_draft("big", target, "other", other, 2048)
    assert str(refused.value) == (
        "other cannot draft for big: their vocabularies differ: both have 49152 tokens, but not the same ones."
    )
    smaller = dataclasses.replace(target, array_lengths={**target.array_lengths, TOKENS: 32000})
    assert vocabulary_mismatch(target, smaller) == "their vocabularies differ: 32000 tokens against the model's 49152"
    eos = dataclasses.replace(target, metadata={**target.metadata, "tokenizer.ggml.eos_token_id": 7})
    assert vocabulary_mismatch(target, eos) == "their end tokens differ (7 against 2)"
