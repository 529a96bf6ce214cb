"""The variants of one model in the library: GGUF files that differ only by their quantization's name."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from app.hub.library import ModelSpec
from app.hub.variants import quant_of
from engines.gguf import GGUFError, read_gguf_info

_QUANT_SUFFIX = re.compile(
    r"[-._]((?:UD-)?(?:I?Q[1-8](?:_[A-Z0-9]{1,3}){0,2}|TQ[12]_0|BF16|F16|FP16|F32|FP32|MXFP4(?:_MOE)?))$", re.IGNORECASE
)


@dataclass(frozen=True)
class Subject:
    """One variant measured: a library model id (or a file's name), its file, type and size."""

    id: str
    path: Path
    quantization: str | None
    size_bytes: int


def family_key(filename: str) -> str:
    """A GGUF file's name without `.gguf` and its quantization suffix, lower case: the same for every variant."""
    stem = filename.removesuffix(".gguf").removesuffix(".GGUF")
    return _QUANT_SUFFIX.sub("", stem).lower()


def checked(subject: Subject) -> Subject:
    """The subject once its GGUF header passed the bounded preflight (model files are hostile input: no tool reads
    one that fails it); ValueError says why not."""
    try:
        read_gguf_info(subject.path)
    except GGUFError as exc:
        raise ValueError(f"{subject.id} is not a readable GGUF file: {exc}") from None
    return subject


def subject_of(spec: ModelSpec) -> Subject:
    if spec.path is None or not spec.path.is_file():
        raise ValueError(f"{spec.id} is not a GGUF file ModelDeck can read")
    return Subject(spec.id, spec.path, quant_of(spec.path.name), spec.size_bytes)


def file_subject(path: Path) -> Subject:
    """A GGUF file outside the library (`--reference FILE`)."""
    if not path.is_file():
        raise ValueError(f"{path} is not a file")
    return Subject(path.name, path.resolve(), quant_of(path.name), path.stat().st_size)


def family(spec: ModelSpec, library: Iterable[ModelSpec]) -> list[Subject]:
    """Every GGUF model of the library that is a variant of `spec` (itself included), largest file first."""
    if spec.path is None:
        return []
    key = family_key(spec.path.name)
    found = {s.id: s for s in library if s.path is not None and s.path.is_file() and s.path.suffix.lower() == ".gguf"
             and family_key(s.path.name) == key}  # fmt: skip
    found[spec.id] = spec
    return sorted((subject_of(s) for s in found.values()), key=lambda s: (-s.size_bytes, s.id))


def most_precise(subjects: list[Subject]) -> Subject:
    """The reference: the variant with the most bits per weight, which for one model is the largest file."""
    return max(subjects, key=lambda s: (s.size_bytes, s.id))
