"""A downloaded safetensors model folder checked before it is registered: config.json is a JSON object and every
shard's header is a bounded JSON table of tensors whose data lies inside the file. Nothing else is read."""

from __future__ import annotations

import json
import struct
from pathlib import Path

MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit


def check_model_folder(files: list[Path]) -> None:
    """Raise ValueError saying what is wrong with the folder's config.json or one of its shards."""
    config = next((f for f in files if f.name == "config.json"), None)
    if config is None:
        raise ValueError("there is no config.json")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise ValueError(f"config.json is not readable JSON ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise ValueError("config.json is not a JSON object")
    shards = [f for f in files if f.name.endswith(".safetensors")]
    if not shards:
        raise ValueError("there are no .safetensors weights")
    for shard in shards:
        check_shard(shard)


def check_shard(path: Path) -> None:
    """The header of one safetensors file: length, JSON, and every tensor's offsets within the data."""
    size = path.stat().st_size
    with path.open("rb") as source:
        prefix = source.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{path.name} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise ValueError(f"{path.name}: the header claims {length:,} bytes of a {size:,}-byte file")
        try:
            header = json.loads(source.read(length))
        except (ValueError, RecursionError) as exc:  # RecursionError: nested thousands of levels deep
            raise ValueError(f"{path.name}: the header is not JSON ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: the header is not a JSON object")
    data_bytes = size - 8 - length
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes
        ):
            raise ValueError(f"{path.name}: tensor {name!r} points outside the file's data")
