"""The bounded GGUF preflight on the bundled model and on hostile copies of it."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from engines.gguf import GGUFError, GGUFPrefixTooShort, read_gguf_info, read_gguf_prefix


def test_bundled_model_header_is_read(bundled_gguf: Path) -> None:
    info = read_gguf_info(bundled_gguf)
    assert info.architecture == "llama"
    assert info.context_length == 8192
    assert info.has_chat_template
    assert info.tensor_count > 100
    assert info.version == 3


def test_truncated_file_names_file_and_problem(bundled_gguf: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(bundled_gguf.read_bytes()[: bundled_gguf.stat().st_size // 2])
    with pytest.raises(GGUFError) as error:
        read_gguf_info(cut)
    assert str(cut) in str(error.value)
    assert "truncated" in str(error.value)


def test_header_cut_inside_metadata(bundled_gguf: Path, tmp_path: Path) -> None:
    cut = tmp_path / "header.gguf"
    cut.write_bytes(bundled_gguf.read_bytes()[:5000])
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf_info(cut)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "not a GGUF file"),
        (b"PK\x03\x04 this is a zip", "not a GGUF file"),
        (b"GGUF" + struct.pack("<I", 99) + bytes(16), "unsupported GGUF version 99"),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0), "implausible header"),
        # one metadata entry whose key claims 2**62 bytes
        (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**62), "more than the limit"),
        # one string value claiming more bytes than the file has
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", 8, 1000),
         "truncated"),
        # an array of 2**60 strings
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 8, 2**60),
         "more than the remaining"),
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"x" + struct.pack("<I", 77),
         "unknown value type 77"),
        # an array of arrays: nothing a model needs, refused rather than recursed into
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"n" + struct.pack("<IIQ", 9, 9, 3),
         "unsupported item type 9"),
        # 2**61 numbers: skipped by arithmetic, which runs past the end of the file
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"u" + struct.pack("<IIQ", 9, 4, 2**61),
         "truncated"),
        # general.alignment of zero
        (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 17) + b"general.alignment"
         + struct.pack("<II", 4, 0), "invalid general.alignment"),
        # a tensor with more dimensions than ggml has
        (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9),
         "claims 9 dimensions"),
        # a tensor whose data would lie 2**60 bytes into a small file
        (b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 2**60),
         "truncated"),
    ],
)  # fmt: skip
def test_hostile_headers_are_refused(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(content)
    with pytest.raises(GGUFError) as error:
        read_gguf_info(path)
    assert problem in str(error.value)
    assert str(path) in str(error.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="cannot be read"):
        read_gguf_info(tmp_path / "absent.gguf")


def test_random_header_corruption_gives_a_bounded_answer(bundled_gguf: Path, tmp_path: Path) -> None:
    """Flip bytes in the header of a copy, many times: each read returns or raises GGUFError, never anything else."""
    copy = tmp_path / "mutated.gguf"
    copy.write_bytes(bundled_gguf.read_bytes())
    header_end = 2_000_000  # metadata and tensor descriptors of this model lie in the first 2 MB
    header = copy.read_bytes()[:header_end]
    generator = random.Random(20261203)
    refusals: list[str] = []
    for _ in range(25):
        mutated = bytearray(header)
        for _ in range(generator.randint(1, 8)):
            mutated[generator.randrange(8, header_end)] = generator.randrange(256)
        with copy.open("r+b") as stream:
            stream.write(mutated)
        try:
            read_gguf_info(copy)
        except GGUFError as error:  # anything else escapes and fails the test
            refusals.append(str(error))
    assert refusals, "no mutation was refused: the corruption did not reach the checks"
    assert all(str(copy) in message for message in refusals)


def test_a_prefix_gives_the_whole_files_facts_once_it_holds_the_header(bundled_gguf: Path) -> None:
    data = bundled_gguf.read_bytes()
    whole = read_gguf_info(bundled_gguf)
    with pytest.raises(GGUFPrefixTooShort) as short:
        read_gguf_prefix(data[:4096], len(data), "remote.gguf")
    assert short.value.needed > 4096 and "remote.gguf" in str(short.value)
    prefix = data[: 4 * 1024 * 1024]
    info = read_gguf_prefix(prefix, len(data), "remote.gguf")
    assert (info.metadata, info.tensor_bytes, info.tensor_elements) == (
        whole.metadata,
        whole.tensor_bytes,
        whole.tensor_elements,
    )


def test_a_prefix_is_checked_against_the_size_the_server_gives(bundled_gguf: Path) -> None:
    prefix = bundled_gguf.read_bytes()[: 4 * 1024 * 1024]
    with pytest.raises(GGUFError, match="truncated: tensor") as caught:
        read_gguf_prefix(prefix, len(prefix), "remote.gguf")  # tensor data would lie past the end of the file
    assert not isinstance(caught.value, GGUFPrefixTooShort)
