"""Quantize a library model with llama-quantize into the models folder, where it joins the library, with its
provenance beside it. With the user's text, an importance matrix is computed from it first (llama-imatrix): the
weights that matter on their domain keep more precision."""

from __future__ import annotations

import datetime
import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from app.installs.llama_tools_build import ToolsBuild
from app.quality.family import Subject, family_key
from app.quality.tools import ToolError, run_tool
from app.task import TaskState

# The types llama-quantize of the pinned sources takes by name (its own table), without the IQ types that need
# an importance matrix.
TYPES = ("Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_1", "Q4_K_S", "Q4_K_M", "Q5_0", "Q5_1",
         "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16")  # fmt: skip
UNQUANTIZED = ("F16", "BF16", "F32")
PROVENANCE_SUFFIX = ".provenance.json"
IMATRIX_CHUNKS = 32  # chunks of 512 tokens: enough to rank the weights, a few minutes at most on a small model


class QuantizeError(Exception):
    """The quantization cannot be done or failed; the message says why."""


@dataclass(frozen=True)
class Quantized:
    path: Path
    provenance: dict[str, object]


def checked_type(name: str) -> str:
    upper = name.upper()
    if upper not in TYPES:
        raise QuantizeError(f"unknown type {name!r}; choose one of {', '.join(TYPES)}")
    return upper


def target_path(source: Subject, quantization: str, models_dir: Path) -> Path:
    """`<name without its type>.<TYPE>.gguf` in the models folder: the family stays recognisable."""
    stem = re.sub(r"\.gguf$", "", source.path.name, flags=re.IGNORECASE)
    base = stem[: len(family_key(source.path.name))] or stem
    return models_dir / f"{base}.{quantization}.gguf"


def quantize(
    tools: ToolsBuild,
    source: Subject,
    quantization: str,
    models_dir: Path,
    state: TaskState,
    log_dir: Path,
    *,
    data: Path | None = None,
    threads: int | None = None,
) -> Quantized:
    """Write `source` quantized to `quantization` into `models_dir`; the file appears whole or not at all."""
    quantization = checked_type(quantization)
    target = target_path(source, quantization, models_dir)
    if target.resolve() == source.path.resolve() or target.exists():
        raise QuantizeError(f"{target} already exists: remove it first to make it again")
    if source.quantization == quantization:
        raise QuantizeError(f"{source.id} is already {quantization}")
    models_dir.mkdir(parents=True, exist_ok=True)
    work = models_dir / f".quantize-{target.stem}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"quantize-{target.stem}.log"
    log_path.unlink(missing_ok=True)
    # An already quantized source loses precision twice: llama-quantize refuses unless asked, and we say so.
    requantized = (source.quantization or "").upper() not in UNQUANTIZED
    thread_args = [str(threads)] if threads else []
    try:
        imatrix = None
        if data is not None:
            state.working_on("importance matrix")
            imatrix = work / "imatrix.gguf"
            run_tool([str(tools.tool("llama-imatrix")), "-m", str(source.path), "-f", str(data), "-o", str(imatrix),
                      "--chunks", str(IMATRIX_CHUNKS), "-c", "512"]
                     + (["-t", str(threads)] if threads else []), log_path, state)  # fmt: skip
        state.working_on("quantizing")
        partial = work / target.name
        argv = [str(tools.tool("llama-quantize"))]
        argv += ["--allow-requantize"] if requantized else []
        argv += ["--imatrix", str(imatrix)] if imatrix else []
        run_tool([*argv, str(source.path), str(partial), quantization, *thread_args], log_path, state)
        provenance: dict[str, object] = {
            "source": {"id": source.id, "path": str(source.path), "quantization": source.quantization,
                       "size_bytes": source.size_bytes},
            "quantization": quantization,
            "requantized": requantized,
            "importance_matrix": None if data is None else {"text": str(data.resolve()), "chunks": IMATRIX_CHUNKS},
            "tool": {"name": "llama-quantize", "version": tools.version, "folder": str(tools.folder)},
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }  # fmt: skip
        (work / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n", encoding="utf-8")
        partial.rename(target)
        (work / "provenance.json").rename(target.with_name(target.name + PROVENANCE_SUFFIX))
    except ToolError as exc:
        raise QuantizeError(str(exc)) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Quantized(target, provenance)
