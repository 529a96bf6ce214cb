"""Small GGUF files written byte by byte, for the hostile-file corpus: a header that is well formed and claims
things no model has (semantic bombs), so that only the bounds on what it says can refuse it."""

from __future__ import annotations

import struct
from collections.abc import Sequence

U32, I32, F32, U64, STRING, ARRAY = 4, 5, 6, 10, 8, 9
_FORMATS = {U32: "<I", I32: "<i", F32: "<f", U64: "<Q"}
F32_TYPE = 0  # ggml type of a float32 tensor

Value = int | str | tuple[int, Sequence[float]]  # a number, a string, or (item type, numbers) for an array


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _entry(key: str, kind: int, value: Value) -> bytes:
    head = _string(key) + struct.pack("<I", kind)
    if kind == STRING:
        assert isinstance(value, str)
        return head + _string(value)
    if kind == ARRAY:
        assert isinstance(value, tuple)
        item_type, items = value
        return (
            head
            + struct.pack("<IQ", item_type, len(items))
            + b"".join(struct.pack(_FORMATS[item_type], item) for item in items)
        )
    assert isinstance(value, int)
    return head + struct.pack(_FORMATS[kind], value)


def empty_strings_entry(key: str, count: int) -> bytes:
    """An array of `count` empty strings (a vocabulary of nothing), encoded."""
    return _string(key) + struct.pack("<IIQ", ARRAY, STRING, count) + bytes(8 * count)


def llama_metadata(**overrides: tuple[int, Value]) -> dict[str, tuple[int, Value]]:
    """A tiny llama's metadata; `overrides` (key without the `llama.` prefix, dots as __) replace or add entries."""
    entries: dict[str, tuple[int, Value]] = {
        "general.architecture": (STRING, "llama"),
        "llama.block_count": (U32, 2),
        "llama.attention.head_count": (U32, 4),
        "llama.attention.head_count_kv": (U32, 2),
        "llama.embedding_length": (U32, 64),
        "llama.feed_forward_length": (U32, 128),
        "llama.context_length": (U32, 2048),
    }
    for name, value in overrides.items():
        entries["llama." + name.replace("__", ".")] = value
    return entries


def gguf_bytes(
    metadata: dict[str, tuple[int, Value]], dims: Sequence[int] = (8, 4), encoded: Sequence[bytes] = ()
) -> bytes:
    """A GGUF v3 file with `metadata`, then the `encoded` entries, and one float32 tensor of shape `dims` whose
    data is in the file."""
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(metadata) + len(encoded))
    head += b"".join(_entry(key, kind, value) for key, (kind, value) in metadata.items()) + b"".join(encoded)
    head += _string("token_embd.weight") + struct.pack("<I", len(dims))
    head += b"".join(struct.pack("<Q", dim) for dim in dims) + struct.pack("<IQ", F32_TYPE, 0)
    head += bytes(-len(head) % 32)
    elements = 1
    for dim in dims:
        elements *= dim
    return head + bytes(4 * min(elements, 1 << 16))
