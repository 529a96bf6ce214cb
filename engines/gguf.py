"""Bounded GGUF header preflight: model files are hostile input, so check them before an engine sees them.

Reads the header, every metadata entry and every tensor descriptor with explicit limits, and checks that all
tensor data lies inside the file. Array values are skipped, not loaded; scalar values are kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

MAGIC = b"GGUF"
MAX_KEY_BYTES = 64 * 1024
MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_ENTRIES = 1_000_000
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32

# value type id -> struct format of fixed-size scalar types
_SCALAR_FORMATS = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING, _ARRAY = 8, 9

# ggml tensor type id -> (elements per block, bytes per block); types not listed are not size-checked
_GGML_BLOCKS = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 36),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
}

Scalar = int | float | bool | str


class GGUFError(ValueError):
    """The file is not a usable GGUF model; the message names the file and the problem."""


@dataclass(frozen=True)
class GGUFInfo:
    """What the header says about a model. Unknown facts are None."""

    path: Path
    version: int
    tensor_count: int
    metadata: dict[str, Scalar]

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def has_chat_template(self) -> bool:
        return isinstance(self.metadata.get("tokenizer.chat_template"), str)


class _BoundedReader:
    def __init__(self, stream: BinaryIO, size: int, path: Path) -> None:
        self._stream = stream
        self._size = size
        self._path = path

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(f"{self._path}: {problem}")

    @property
    def size(self) -> int:
        return self._size

    @property
    def offset(self) -> int:
        return self._stream.tell()

    def read(self, count: int, what: str) -> bytes:
        if count > self._size - self.offset:
            raise self.fail(f"truncated: {what} needs {count} bytes at offset {self.offset}, file has {self._size}")
        return self._stream.read(count)

    def skip(self, count: int, what: str) -> None:
        if count > self._size - self.offset:
            raise self.fail(f"truncated: {what} runs past the end of the file ({self._size} bytes)")
        self._stream.seek(count, 1)

    def unpack(self, fmt: str, what: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(fmt, self.read(struct.calcsize(fmt), what))[0]
        return value

    def u32(self, what: str) -> int:
        return int(self.unpack("<I", what))

    def u64(self, what: str) -> int:
        return int(self.unpack("<Q", what))

    def string(self, what: str, limit: int) -> str:
        length = self.u64(f"length of {what}")
        if length > limit:
            raise self.fail(f"{what} claims {length} bytes, more than the limit of {limit}")
        raw = self.read(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"{what} is not valid UTF-8") from exc


def read_gguf_info(path: Path) -> GGUFInfo:
    """Check a GGUF file's structure with bounds and return its header facts, or raise GGUFError."""
    try:
        size = path.stat().st_size
        stream = path.open("rb")
    except OSError as exc:
        raise GGUFError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    with stream:
        reader = _BoundedReader(stream, size, path)
        magic = reader.read(4, "magic") if size >= 4 else b""
        if magic != MAGIC:
            raise reader.fail(f"not a GGUF file (starts with {magic!r}, expected {MAGIC!r})")
        version = reader.u32("version")
        if version not in (2, 3):
            raise reader.fail(f"unsupported GGUF version {version}")
        tensor_count = reader.u64("tensor count")
        kv_count = reader.u64("metadata count")
        if tensor_count > MAX_ENTRIES or kv_count > MAX_ENTRIES:
            raise reader.fail(f"implausible header: {tensor_count} tensors, {kv_count} metadata entries")
        metadata = {key: value for key, value in _read_metadata(reader, kv_count) if value is not None}
        _check_tensors(reader, tensor_count, size, metadata)
    return GGUFInfo(path=path, version=version, tensor_count=tensor_count, metadata=metadata)


def _read_metadata(reader: _BoundedReader, count: int) -> list[tuple[str, Scalar | None]]:
    entries: list[tuple[str, Scalar | None]] = []
    for index in range(count):
        key = reader.string(f"metadata key #{index}", MAX_KEY_BYTES)
        value_type = reader.u32(f"type of {key!r}")
        entries.append((key, _read_value(reader, value_type, key)))
    return entries


def _read_value(reader: _BoundedReader, value_type: int, key: str) -> Scalar | None:
    if value_type in _SCALAR_FORMATS:
        return reader.unpack(_SCALAR_FORMATS[value_type], f"value of {key!r}")
    if value_type == _STRING:
        return reader.string(f"value of {key!r}", MAX_STRING_BYTES)
    if value_type == _ARRAY:
        _skip_array(reader, key)
        return None
    raise reader.fail(f"metadata {key!r} has unknown value type {value_type}")


def _skip_array(reader: _BoundedReader, key: str) -> None:
    item_type = reader.u32(f"item type of {key!r}")
    count = reader.u64(f"length of {key!r}")
    if item_type in _SCALAR_FORMATS:
        reader.skip(count * struct.calcsize(_SCALAR_FORMATS[item_type]), f"array {key!r}")
    elif item_type == _STRING:
        remaining = reader.size - reader.offset
        if count * 8 > remaining:  # each string needs at least its 8-byte length
            raise reader.fail(
                f"truncated or corrupt: array {key!r} claims {count} strings, more than the remaining "
                f"{remaining} bytes could hold"
            )
        for _ in range(count):
            length = reader.u64(f"string length in {key!r}")
            if length > MAX_STRING_BYTES:
                raise reader.fail(f"a string in {key!r} claims {length} bytes")
            reader.skip(length, f"string in {key!r}")
    else:
        raise reader.fail(f"array {key!r} has unsupported item type {item_type}")


def _check_tensors(reader: _BoundedReader, count: int, size: int, metadata: dict[str, Scalar]) -> None:
    data_end = 0
    last_name = ""
    for index in range(count):
        name = reader.string(f"name of tensor #{index}", MAX_KEY_BYTES)
        n_dims = reader.u32(f"dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            raise reader.fail(f"tensor {name!r} claims {n_dims} dimensions (at most {MAX_DIMS})")
        elements = 1
        for _ in range(n_dims):
            elements *= reader.u64(f"dimensions of {name!r}")
        ggml_type = reader.u32(f"type of {name!r}")
        offset = reader.u64(f"offset of {name!r}")
        block = _GGML_BLOCKS.get(ggml_type)
        end = offset + (elements // block[0]) * block[1] if block else offset
        if end > data_end:
            data_end, last_name = end, name
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        raise reader.fail(f"invalid general.alignment {alignment!r}")
    data_start = -(-reader.offset // alignment) * alignment
    if data_start + data_end > size:
        raise reader.fail(
            f"truncated: tensor {last_name!r} ends at byte {data_start + data_end} but the file has {size} bytes"
        )
