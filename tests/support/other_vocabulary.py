"""A copy of a GGUF model whose vocabulary differs from the original's in one token: the same header layout, one
token's last letter changed in place. No model with another vocabulary can be downloaded here, and speculative
decoding's pairing must refuse one."""

from __future__ import annotations

import struct
from pathlib import Path

TOKENS_KEY = b"tokenizer.ggml.tokens"
FIRST_CANDIDATE = 1000  # past the special and byte tokens: ordinary word pieces


def copy_with_other_vocabulary(source: Path, target: Path) -> Path:
    data = bytearray(source.read_bytes())
    at = data.index(TOKENS_KEY) + len(TOKENS_KEY)
    value_type, item_type, count = struct.unpack_from("<IIQ", data, at)
    assert (value_type, item_type) == (9, 8) and count > FIRST_CANDIDATE, "not an array of strings"
    at += 16
    for index in range(count):
        (length,) = struct.unpack_from("<Q", data, at)
        last = at + 8 + length - 1
        if index >= FIRST_CANDIDATE and length and 0x61 <= data[last] <= 0x7A:  # ends in a lower-case letter
            data[last] = 0x61 + (data[last] - 0x61 + 1) % 26  # the next letter: still UTF-8, still one byte
            break
        at += 8 + length
    else:
        raise AssertionError("no token ends in a lower-case letter")
    target.write_bytes(bytes(data))
    return target
