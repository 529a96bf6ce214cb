"""GGUF quantization variants from a repository's file names; the parts of a split GGUF form one variant."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Quantization names as llama.cpp and the big quantizers write them: Q4_K_M, Q8_0, IQ4_XS, TQ1_0, UD-Q4_K_XL, F16...
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q[1-8](?:_[A-Z0-9]{1,3}){0,2}|TQ[12]_0|BF16|F16|FP16|F32|FP32|MXFP4(?:_MOE)?))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})$")


@dataclass(frozen=True)
class RepoFile:
    """A file in a Hub repository: its path, size and the sha256 of its LFS object (None for plain git files)."""

    path: str
    size: int | None
    sha256: str | None = None


@dataclass(frozen=True)
class Variant:
    """One downloadable GGUF model: a single file, or every part of a split one."""

    name: str  # the quantization (Q4_K_M), or the file's stem when the name carries none
    quant: str | None
    files: tuple[RepoFile, ...]
    parts_expected: int

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def complete(self) -> bool:
        return len(self.files) == self.parts_expected


def quant_of(filename: str) -> str | None:
    """The quantization named in a GGUF file name, upper case, or None when it names none."""
    stem = _SPLIT.sub("", filename.rsplit("/", 1)[-1].removesuffix(".gguf"))
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else None


def gguf_variants(files: list[RepoFile]) -> list[Variant]:
    """The GGUF variants among a repository's files, smallest first; vision projectors (mmproj) are left out."""
    groups: dict[str, list[tuple[int, int, RepoFile]]] = {}
    for file in files:
        base = file.path.rsplit("/", 1)[-1]
        if not base.lower().endswith(".gguf") or base.lower().startswith("mmproj"):
            continue
        stem = file.path[: -len(".gguf")]
        split = _SPLIT.search(stem)
        part, parts = (int(split.group(1)), int(split.group(2))) if split else (1, 1)
        key = _SPLIT.sub("", stem)
        groups.setdefault(key, []).append((part, parts, file))
    variants = []
    for key, members in groups.items():
        members.sort(key=lambda m: m[0])
        quant = quant_of(key + ".gguf")
        name = quant or key.rsplit("/", 1)[-1]
        variants.append(Variant(name, quant, tuple(m[2] for m in members), max(m[1] for m in members)))
    variants.sort(key=lambda v: (v.size is None, v.size or 0, v.name))
    return variants


def pick_variant(variants: list[Variant], wanted: str) -> Variant | None:
    """The variant named `wanted` (case-insensitive), matched on its quantization or its name."""
    for variant in variants:
        if wanted.upper() in (variant.name.upper(), (variant.quant or "").upper()):
            return variant
    return None


SAFETENSORS = "safetensors"
# What vLLM reads from a model folder besides the weights: the model's config, its tokenizer and chat template.
# Pickled weights (*.bin, *.pt) are never fetched: loading them can run code.
_VLLM_SIDE_FILES = re.compile(
    r"(?:[^/]+\.json|tokenizer\.model|[^/]+\.tiktoken|merges\.txt|vocab\.txt|[^/]+\.jinja)", re.IGNORECASE
)
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.safetensors$")


def safetensors_variant(files: list[RepoFile]) -> Variant | None:
    """The files vLLM serves a repository from: its top-level safetensors shards, config.json, tokenizer files and
    generation config. None when the repository has no config.json or no safetensors weights at the top level."""
    top = [f for f in files if "/" not in f.path]
    weights = sorted((f for f in top if f.path.endswith(".safetensors")), key=lambda f: f.path)
    if not weights or not any(f.path == "config.json" for f in top):
        return None
    side = sorted((f for f in top if _VLLM_SIDE_FILES.fullmatch(f.path)), key=lambda f: f.path)
    shards = [_SHARD.search(f.path) for f in weights]
    expected = max((int(m.group(2)) for m in shards if m), default=0)
    # Shards named -0000K-of-0000N must all be there; a lone model.safetensors counts as itself.
    parts = len(side) + (expected + sum(1 for m in shards if m is None) if expected else len(weights))
    return Variant(SAFETENSORS, None, (*weights, *side), parts)
