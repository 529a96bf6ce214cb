"""Embeddings as OpenAI returns them, from what an engine answers."""

from __future__ import annotations

import base64
import json
import math
import struct


def shape_embeddings(answer: bytes, pool: bool, as_base64: bool) -> bytes:
    """One vector per input, as OpenAI returns it: per-token vectors mean-pooled and L2-normalized when the
    engine does not pool; little-endian float32 in base64 when the client asked for that."""
    try:
        result = json.loads(answer)
        for item in result["data"]:
            vector = item["embedding"]
            if pool and vector and isinstance(vector[0], list):
                pooled = [sum(column) / len(vector) for column in zip(*vector, strict=True)]
                norm = math.sqrt(sum(value * value for value in pooled)) or 1.0
                vector = [value / norm for value in pooled]
            item["embedding"] = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if (
                as_base64) else vector  # fmt: skip
    except (ValueError, KeyError, TypeError, struct.error, RecursionError):
        return answer
    return json.dumps(result).encode()
