"""Semantic bombs in the hostile-file corpus: well-formed GGUF headers whose counts (layers, heads, context,
vocabulary, widths, dimensions) no model has. The structure checks pass them; the bounds on what they say refuse
them, naming the field, before anything is sized by a count (a 2**31-layer tuple would take 16 GiB)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from app.planner.facts import facts_from_gguf
from engines.gguf import GGUFError, read_gguf_info, read_gguf_prefix
from tests.engines.gguf_builder import (
    ARRAY,
    F32,
    I32,
    STRING,
    U32,
    U64,
    empty_strings_entry,
    gguf_bytes,
    llama_metadata,
)

U32_MAX, U64_MAX, I32_MIN = 2**32 - 1, 2**64 - 1, -(2**31)


def write(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "bomb.gguf"
    path.write_bytes(content)
    return path


def test_the_builder_writes_a_file_the_checks_accept(tmp_path: Path) -> None:
    """The corpus below is refused for its one bad count, not for anything else in the file."""
    facts = facts_from_gguf(read_gguf_info(write(tmp_path, gguf_bytes(llama_metadata()))))
    assert (facts.layers, facts.attention_heads, facts.kv_heads, facts.trained_context) == (2, 4, (2, 2), 2048)
    assert facts.parameters == 32


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"block_count": (U32, 2**31)}, "llama.block_count"),  # the 16 GiB tuple
        ({"block_count": (U64, U64_MAX)}, "llama.block_count"),
        ({"block_count": (I32, I32_MIN)}, "llama.block_count"),
        ({"attention__head_count": (U32, U32_MAX)}, "llama.attention.head_count"),
        ({"attention__head_count_kv": (U64, U64_MAX)}, "llama.attention.head_count_kv"),
        ({"attention__head_count_kv": (ARRAY, (U32, [2, U32_MAX]))}, "llama.attention.head_count_kv"),
        ({"attention__key_length": (U32, U32_MAX)}, "llama.attention.key_length"),
        ({"context_length": (U64, U64_MAX)}, "llama.context_length"),
        ({"context_length": (I32, -1)}, "llama.context_length"),
        ({"embedding_length": (U32, U32_MAX)}, "llama.embedding_length"),
        ({"feed_forward_length": (ARRAY, (U64, [128, U64_MAX]))}, "llama.feed_forward_length"),
        ({"vocab_size": (U32, U32_MAX)}, "llama.vocab_size"),
        ({"expert_count": (U32, U32_MAX)}, "llama.expert_count"),
    ],
)
def test_counts_no_model_has_are_refused_naming_the_field(
    tmp_path: Path, overrides: dict[str, tuple[int, object]], field: str
) -> None:
    path = write(tmp_path, gguf_bytes(llama_metadata(**overrides)))  # type: ignore[arg-type]
    with pytest.raises(GGUFError) as refused:
        read_gguf_info(path)
    assert field in str(refused.value) and "plausible range" in str(refused.value)
    assert str(path) in str(refused.value)


def test_a_148_byte_header_claiming_two_billion_layers_is_refused(tmp_path: Path) -> None:
    """The issue's file: the smallest header that names an architecture and a layer count."""
    content = gguf_bytes({"general.architecture": (STRING, "llama"), "llama.block_count": (U32, 2**31)}, dims=(1,))
    with pytest.raises(GGUFError, match=r"llama\.block_count is 2147483648"):
        read_gguf_info(write(tmp_path, content))


def test_a_layer_count_under_another_architecture_is_bounded_too(tmp_path: Path) -> None:
    metadata = {"general.architecture": (STRING, "qwen3moe"), "qwen3moe.block_count": (U64, U64_MAX)}
    with pytest.raises(GGUFError, match=r"qwen3moe\.block_count"):
        read_gguf_info(write(tmp_path, gguf_bytes(metadata)))  # type: ignore[arg-type]


def test_a_per_layer_count_that_is_not_a_whole_number_is_refused(tmp_path: Path) -> None:
    """facts_from_gguf turns each per-layer value into an int: a NaN there would raise, so it is refused."""
    path = write(tmp_path, gguf_bytes(llama_metadata(attention__head_count=(ARRAY, (F32, [4.0, math.nan])))))
    with pytest.raises(GGUFError, match=r"llama\.attention\.head_count holds 4\.0, not a whole number"):
        read_gguf_info(path)


@pytest.mark.parametrize(
    ("dims", "problem"),
    [
        ((8, 0), "dimension 1 is 0"),
        ((0,), "dimension 0 is 0"),
        ((U64_MAX, 1), f"dimension 0 is {U64_MAX}"),
        ((2**40, 2**40), "claims 1208925819614629174706176 elements"),
    ],
)
def test_tensor_dimensions_are_bounded(tmp_path: Path, dims: tuple[int, ...], problem: str) -> None:
    path = write(tmp_path, gguf_bytes(llama_metadata(), dims=dims))
    with pytest.raises(GGUFError) as refused:
        read_gguf_info(path)
    assert problem in str(refused.value) and "token_embd.weight" in str(refused.value)


def test_a_vocabulary_over_the_limit_is_refused(tmp_path: Path) -> None:
    """A tokens array of 2**21 + 1 empty strings, 16 MB of lengths, every one readable: refused before the
    first is read (at about 10 microseconds a string, 2**24 of them held the preflight for three minutes)."""
    tokens = empty_strings_entry("tokenizer.ggml.tokens", 2**21 + 1)
    path = write(tmp_path, gguf_bytes(llama_metadata(), encoded=[tokens]))
    with pytest.raises(GGUFError, match=r"'tokenizer\.ggml\.tokens' holds 2097153 strings, more than the limit"):
        read_gguf_info(path)


def test_a_vocabulary_at_the_limit_is_read(tmp_path: Path) -> None:
    path = write(tmp_path, gguf_bytes(llama_metadata(), encoded=[empty_strings_entry("tokenizer.ggml.tokens", 1000)]))
    assert facts_from_gguf(read_gguf_info(path)).vocab_size == 1000


def test_a_bomb_read_from_the_hub_by_its_first_bytes_is_refused_too() -> None:
    """A Hub model page plans from a prefix of the file (a Range request): the same bounds apply there."""
    content = gguf_bytes(llama_metadata(block_count=(U32, 2**31)))
    with pytest.raises(GGUFError, match=r"remote\.gguf: llama\.block_count is 2147483648"):
        read_gguf_prefix(content[:4096], len(content), "remote.gguf")
