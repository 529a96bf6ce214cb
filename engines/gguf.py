"""Bounded GGUF header preflight: model files are hostile input, so check them before an engine sees them.

Reads the header, every metadata entry and every tensor descriptor with explicit limits, and checks that all
tensor data lies inside the file. Scalars and short numeric arrays are kept; other arrays are skipped, their length
noted. Tensor sizes come from the `gguf` package's table of ggml block sizes. The package's own GGUFReader is not
used on untrusted files: it maps every array into memory before any bound is checked.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType

MAGIC = b"GGUF"
MAX_KEY_BYTES = 64 * 1024
MAX_STRING_BYTES = 16 * 1024 * 1024
MAX_ENTRIES = 1_000_000
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32
MAX_KEPT_ARRAY = 4096  # per-layer values of the largest models fit; vocabularies do not
MAX_DIM = 2**40  # elements along one tensor dimension
MAX_TENSOR_ELEMENTS = 2**50  # elements of one tensor: far beyond any model, far below what overflows a size
# The counts a planner sizes things by (a tuple per layer, a table per head), bounded well above the largest
# models (a few hundred layers, 128 heads, 10M tokens of context, 256k vocabularies): a header claiming more is
# refused before anything is sized by it. Keys under the architecture's prefix, then global keys.
ARCH_COUNT_LIMITS = {
    "block_count": MAX_KEPT_ARRAY,
    "attention.head_count": 65_536,
    "attention.head_count_kv": 65_536,
    "attention.key_length": 65_536,
    "attention.value_length": 65_536,
    "context_length": 2**27,
    "embedding_length": 2**20,
    "feed_forward_length": 2**22,
    "expert_feed_forward_length": 2**22,
    "expert_count": 65_536,
    "expert_used_count": 65_536,
    "vocab_size": 2**21,
}
# Strings in one array (vocabularies of 262k tokens, merge lists of a few 100k): each is read on its own, about
# 10 microseconds apiece, so 2**24 of them would hold a preflight for minutes.
MAX_STRING_ARRAY = 2**21
# ggml type id -> (elements per block, bytes per block)
_BLOCKS: dict[int, tuple[int, int]] = {int(kind): size for kind, size in GGML_QUANT_SIZES.items()}

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

Scalar = int | float | bool | str


class GGUFError(ValueError):
    """The file is not a usable GGUF model; the message names the file and the problem."""


class GGUFPrefixTooShort(GGUFError):
    """The header runs past the bytes given, though not past the file: read `needed` bytes or more and retry."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed


@dataclass(frozen=True)
class GGUFInfo:
    """What the header says about a model. Unknown facts are None."""

    path: Path
    version: int
    tensor_count: int
    metadata: dict[str, Scalar]
    arrays: dict[str, tuple[int | float, ...]] = field(default_factory=dict)  # small numeric arrays, kept whole
    array_lengths: dict[str, int] = field(default_factory=dict)  # every array's length (tokens: the vocabulary)
    array_digests: dict[str, str] = field(default_factory=dict)  # sha256 of the string arrays asked for
    tensor_elements: dict[int, int] = field(default_factory=dict)  # ggml type id -> elements of that type
    tensor_bytes: int = 0  # the size of all tensor data, from the descriptors

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

    @property
    def quantization(self) -> str | None:
        """The file type's name (Q4_K_M, Q8_0, F16, ...), else the name of the type holding most weights."""
        file_type = self.metadata.get("general.file_type")
        if isinstance(file_type, int) and not isinstance(file_type, bool):
            try:
                return LlamaFileType(file_type).name.removeprefix("MOSTLY_")
            except ValueError:
                pass  # a file type newer than the gguf package: fall back to the tensors
        if not self.tensor_elements:
            return None
        dominant = max(self.tensor_elements, key=lambda t: self.tensor_elements[t])
        try:
            return GGMLQuantizationType(dominant).name
        except ValueError:
            return None


class _BoundedReader:
    """Reads with every length checked against the file's size; `available` bytes of it are at hand (a prefix)."""

    def __init__(self, stream: BinaryIO, size: int, path: Path, available: int | None = None) -> None:
        self._stream = stream
        self._size = size
        self._path = path
        self._available = size if available is None else min(available, size)

    def fail(self, problem: str) -> GGUFError:
        return GGUFError(f"{self._path}: {problem}")

    @property
    def size(self) -> int:
        return self._size

    @property
    def path(self) -> Path:
        return self._path

    @property
    def offset(self) -> int:
        return self._stream.tell()

    def read(self, count: int, what: str) -> bytes:
        if count > self._size - self.offset:
            raise self.fail(f"truncated: {what} needs {count} bytes at offset {self.offset}, file has {self._size}")
        if count > self._available - self.offset:
            raise GGUFPrefixTooShort(
                f"{self._path}: {what} ends at byte {self.offset + count}, past the {self._available} bytes read",
                self.offset + count,
            )
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


def read_gguf_info(path: Path, digests: frozenset[str] = frozenset()) -> GGUFInfo:
    """Check a GGUF file's structure with bounds and return its header facts, or raise GGUFError. The string arrays
    named in `digests` (the vocabulary's tokens) are read rather than skipped, for their sha256 in `array_digests`."""
    try:
        size = path.stat().st_size
        stream = path.open("rb")
    except OSError as exc:
        raise GGUFError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    with stream:
        return _read_header(_BoundedReader(stream, size, path), digests)


def read_gguf_prefix(prefix: bytes, file_size: int, name: str) -> GGUFInfo:
    """Header facts from the first bytes of a GGUF file of `file_size` bytes that is not at hand (a Hub file read
    with a Range request). Every bound is checked as for a whole file, tensor data against `file_size`. Raises
    GGUFPrefixTooShort when the header runs past the prefix, GGUFError when the file is not a usable GGUF."""
    return _read_header(_BoundedReader(io.BytesIO(prefix), file_size, Path(name), available=len(prefix)))


def _read_header(reader: _BoundedReader, digests: frozenset[str] = frozenset()) -> GGUFInfo:
    size = reader.size
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
    info = GGUFInfo(path=reader.path, version=version, tensor_count=tensor_count, metadata={})
    _read_metadata(reader, kv_count, info, digests)
    _check_counts(reader, info)
    tensor_bytes = _read_tensors(reader, tensor_count, size, info)
    return dataclasses.replace(info, tensor_bytes=tensor_bytes)


def _read_metadata(reader: _BoundedReader, count: int, info: GGUFInfo, digests: frozenset[str]) -> None:
    for index in range(count):
        key = reader.string(f"metadata key #{index}", MAX_KEY_BYTES)
        value_type = reader.u32(f"type of {key!r}")
        if value_type in _SCALAR_FORMATS:
            info.metadata[key] = reader.unpack(_SCALAR_FORMATS[value_type], f"value of {key!r}")
        elif value_type == _STRING:
            info.metadata[key] = reader.string(f"value of {key!r}", MAX_STRING_BYTES)
        elif value_type == _ARRAY:
            _read_array(reader, key, info, key in digests)
        else:
            raise reader.fail(f"metadata {key!r} has unknown value type {value_type}")


def _check_counts(reader: _BoundedReader, info: GGUFInfo) -> None:
    """Refuse a header whose layer, head, context, vocabulary or width counts no model has, naming the field
    (the vocabulary's own array is bounded as it is read).
    A count is one whole number, or one a layer in an array (longer arrays are not kept, so never used)."""
    for name, limit in ARCH_COUNT_LIMITS.items():
        key = f"{info.architecture}.{name}"  # as app.planner.facts reads it, "None." prefix included
        scalar = info.metadata.get(key)
        values = info.arrays.get(key, (scalar,) if isinstance(scalar, int) and not isinstance(scalar, bool) else ())
        for value in values:
            if not isinstance(value, int):  # a scalar of another type is an unknown count; an array's is used
                raise reader.fail(f"{key} holds {value!r}, not a whole number")
            if not 0 <= value <= limit:
                raise reader.fail(f"{key} is {value}, outside the plausible range 0 to {limit}")


def _read_array(reader: _BoundedReader, key: str, info: GGUFInfo, digest: bool = False) -> None:
    """Keep a short numeric array (per-layer head counts); skip anything else, recording only its length (and, for
    a string array with `digest`, the sha256 of its strings, each after its length)."""
    item_type = reader.u32(f"item type of {key!r}")
    count = reader.u64(f"length of {key!r}")
    info.array_lengths[key] = count
    if item_type in _SCALAR_FORMATS:
        fmt = _SCALAR_FORMATS[item_type]
        item_size = struct.calcsize(fmt)
        if count <= MAX_KEPT_ARRAY:
            raw = reader.read(count * item_size, f"array {key!r}")
            info.arrays[key] = tuple(struct.unpack(f"<{count}{fmt[1]}", raw))
        else:
            reader.skip(count * item_size, f"array {key!r}")
    elif item_type == _STRING:
        remaining = reader.size - reader.offset
        if count * 8 > remaining:  # each string needs at least its 8-byte length
            raise reader.fail(
                f"truncated or corrupt: array {key!r} claims {count} strings, more than the remaining "
                f"{remaining} bytes could hold"
            )
        if count > MAX_STRING_ARRAY:
            raise reader.fail(f"array {key!r} holds {count} strings, more than the limit of {MAX_STRING_ARRAY}")
        hashed = hashlib.sha256() if digest else None
        for _ in range(count):
            length = reader.u64(f"string length in {key!r}")
            if length > MAX_STRING_BYTES:
                raise reader.fail(f"a string in {key!r} claims {length} bytes")
            if hashed is None:
                reader.skip(length, f"string in {key!r}")
            else:
                hashed.update(b"%d:" % length + reader.read(length, f"string in {key!r}"))
        if hashed is not None:
            info.array_digests[key] = hashed.hexdigest()
    else:
        raise reader.fail(f"array {key!r} has unsupported item type {item_type}")


def _read_tensors(reader: _BoundedReader, count: int, size: int, info: GGUFInfo) -> int:
    """Count elements per type into `info` and return the total size of the tensor data."""
    data_end = tensor_bytes = 0
    last_name = ""
    for index in range(count):
        name = reader.string(f"name of tensor #{index}", MAX_KEY_BYTES)
        n_dims = reader.u32(f"dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            raise reader.fail(f"tensor {name!r} claims {n_dims} dimensions (at most {MAX_DIMS})")
        elements = 1
        for axis in range(n_dims):
            dim = reader.u64(f"dimensions of {name!r}")
            if not 1 <= dim <= MAX_DIM:
                raise reader.fail(f"tensor {name!r} dimension {axis} is {dim} (must be from 1 to {MAX_DIM})")
            elements *= dim
        if elements > MAX_TENSOR_ELEMENTS:
            raise reader.fail(f"tensor {name!r} claims {elements} elements (at most {MAX_TENSOR_ELEMENTS})")
        ggml_type = reader.u32(f"type of {name!r}")
        offset = reader.u64(f"offset of {name!r}")
        info.tensor_elements[ggml_type] = info.tensor_elements.get(ggml_type, 0) + elements
        block = _BLOCKS.get(ggml_type)  # a type newer than the gguf package is counted, not sized
        nbytes = (elements // block[0]) * block[1] if block else 0
        tensor_bytes += nbytes
        if offset + nbytes > data_end:
            data_end, last_name = offset + nbytes, name
    alignment = info.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        raise reader.fail(f"invalid general.alignment {alignment!r}")
    data_start = -(-reader.offset // alignment) * alignment
    if data_start + data_end > size:
        raise reader.fail(
            f"truncated: tensor {last_name!r} ends at byte {data_start + data_end} but the file has {size} bytes"
        )
    return tensor_bytes
