"""A quality run: the reference variant's logits on a text saved by llama-perplexity, then each other variant's
perplexity, KL divergence and top-token agreement against them (llama.cpp's --kl-divergence mode).

A plain function that takes a TaskState (cancel) and a progress callback, so the CLI, the service's child process
and the tests run it alike. Every figure comes from the tool's own output; a figure it did not print is None.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.installs.llama_tools_build import ToolsBuild
from app.quality.family import Subject
from app.quality.tools import ToolError, run_tool
from app.task import TaskState

MAX_CONTEXT = 512  # tokens per chunk: llama.cpp's own setting for its published perplexity figures
MIN_CONTEXT = 64
MIN_TOKENS = 2 * MIN_CONTEXT
MAX_TOKENS = 1_048_576

_FLOAT = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
_CHUNKS = re.compile(r"(?:calculating perplexity|computing) over (\d+) chunks, n_ctx=(\d+)")
_FINAL = re.compile(rf"Final estimate: PPL = {_FLOAT} \+/- {_FLOAT}")
_PPL_Q = re.compile(rf"^Mean PPL\(Q\)\s*:\s*{_FLOAT}\s*±\s*{_FLOAT}")
_PPL_BASE = re.compile(rf"^Mean PPL\(base\)\s*:\s*{_FLOAT}")
_KLD = re.compile(rf"^Mean\s+KLD:\s*{_FLOAT}")
_KLD_99 = re.compile(rf"^99\.0%\s+KLD:\s*{_FLOAT}")
_KLD_MAX = re.compile(rf"^Maximum KLD:\s*{_FLOAT}")
_TOP = re.compile(rf"^Same top p:\s*{_FLOAT}\s*±\s*{_FLOAT} %")
_KL_CHUNK = re.compile(r"^\s*(\d+)\s+-?\d")
_TOO_SHORT = re.compile(r"you need at least (\d+) tokens")

Progress = Callable[[dict[str, Any]], None]


class QualityError(Exception):
    """The run cannot be done or failed; the message says why."""


@dataclass(frozen=True)
class VariantResult:
    """One variant's figures against the reference; the reference's own KL divergence is 0 and its agreement 1 by
    definition. `seconds` and `peak_rss_bytes`: the tool's run for this variant (model load included)."""

    id: str
    quantization: str | None
    size_bytes: int
    reference: bool
    perplexity: float | None
    perplexity_error: float | None
    ppl_ratio: float | None  # PPL(variant) / PPL(reference) on the same tokens
    kld_mean: float | None
    kld_p99: float | None
    kld_max: float | None
    top_token_agreement: float | None  # fraction of tokens where both put the same token on top
    seconds: float
    peak_rss_bytes: int | None

    @property
    def ppl_increase_pct(self) -> float | None:
        return None if self.ppl_ratio is None else (self.ppl_ratio - 1) * 100


@dataclass(frozen=True)
class Layout:
    """How the text is cut: chunks of n_ctx tokens; the second half of each chunk is scored."""

    n_ctx: int
    chunks: int

    @classmethod
    def for_tokens(cls, tokens: int) -> Layout:
        if not MIN_TOKENS <= tokens <= MAX_TOKENS:
            raise QualityError(f"--tokens must be from {MIN_TOKENS} to {MAX_TOKENS}, got {tokens}")
        n_ctx = min(MAX_CONTEXT, tokens // 2)
        return cls(n_ctx, tokens // n_ctx)


@dataclass(frozen=True)
class Measured:
    """The figures of a run and how the text was cut (as the tool reported it)."""

    results: list[VariantResult]
    n_ctx: int
    chunks: int


def _first(pattern: re.Pattern[str], lines: list[str], group: int = 1) -> float | None:
    for line in lines:
        match = pattern.search(line)
        if match:
            return float(match.group(group))
    return None


def _silent(subject: Subject, output: list[str], log_path: Path) -> str:
    said = [line for line in output if "error" in line.lower() or "failed" in line.lower()] or output[-5:]
    return f"{subject.id}: llama-perplexity printed no figures:\n" + "\n".join(said[-5:]) + f"\nFull log: {log_path}"


def _common(tools: ToolsBuild, model: Path, layout: Layout, threads: int | None) -> list[str]:
    argv = [str(tools.tool("llama-perplexity")), "-m", str(model), "-c", str(layout.n_ctx), "--chunks",
            str(layout.chunks)]  # fmt: skip
    return argv + (["-t", str(threads)] if threads else [])


def measure(
    tools: ToolsBuild,
    reference: Subject,
    variants: list[Subject],
    text: Path,
    workdir: Path,
    log_path: Path,
    layout: Layout,
    state: TaskState,
    progress: Progress,
    *,
    threads: int | None = None,
) -> Measured:
    """Measure every variant against `reference` on `text`, the tools' output appended to `log_path`; raises
    QualityError, or Stopped on a cancel."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logits = workdir / "reference.logits"
    others = [v for v in variants if v.path != reference.path]
    steps = 1 + len(others)
    progress({"type": "step", "index": 0, "of": steps, "variant": reference.id, "what": "reference logits"})
    argv = [*_common(tools, reference.path, layout, threads), "-f", str(text), "--kl-divergence-base", str(logits)]
    try:
        base = run_tool(argv, log_path, state)
    except ToolError as exc:
        raise QualityError(str(exc)) from None
    # llama-perplexity says what went wrong and still exits 0: its output decides.
    needed = next((m for m in map(_TOO_SHORT.search, base.output) if m), None)
    if needed:
        raise QualityError(f"the text is too short: a run of chunks of {layout.n_ctx} tokens needs at least "
                           f"{needed.group(1)} tokens; give a longer text or fewer --tokens")  # fmt: skip
    if _first(_FINAL, base.output) is None:
        raise QualityError(_silent(reference, base.output, log_path))
    found = next((m for m in map(_CHUNKS.search, base.output) if m), None)
    chunks, n_ctx = (int(found.group(1)), int(found.group(2))) if found else (layout.chunks, layout.n_ctx)
    ppl = _first(_FINAL, base.output)
    results = [VariantResult(reference.id, reference.quantization, reference.size_bytes, True, ppl,
                             _first(_FINAL, base.output, 2), 1.0 if ppl is not None else None, 0.0, 0.0, 0.0, 1.0,
                             base.seconds, base.peak_rss_bytes)]  # fmt: skip
    progress({"type": "variant", "result": results[0].__dict__})
    for index, variant in enumerate(others, start=1):
        progress({"type": "step", "index": index, "of": steps, "variant": variant.id, "what": "KL divergence"})

        def chunk_done(line: str, index: int = index) -> None:
            match = _KL_CHUNK.match(line)
            if match and int(match.group(1)) <= chunks:
                progress({"type": "chunk", "index": index, "done": int(match.group(1)), "of": chunks})

        argv = _common(tools, variant.path, Layout(n_ctx, chunks), threads)
        argv += ["--kl-divergence-base", str(logits), "--kl-divergence"]
        try:
            run = run_tool(argv, log_path, state, chunk_done)
        except ToolError as exc:
            raise QualityError(f"{variant.id}: {exc}") from None
        ppl_q, ppl_base = _first(_PPL_Q, run.output), _first(_PPL_BASE, run.output)
        if ppl_q is None or _first(_KLD, run.output) is None:
            raise QualityError(_silent(variant, run.output, log_path))
        top = _first(_TOP, run.output)
        result = VariantResult(
            variant.id, variant.quantization, variant.size_bytes, False, ppl_q, _first(_PPL_Q, run.output, 2),
            ppl_q / ppl_base if ppl_q is not None and ppl_base else None, _first(_KLD, run.output),
            _first(_KLD_99, run.output), _first(_KLD_MAX, run.output), None if top is None else top / 100,
            run.seconds, run.peak_rss_bytes,
        )  # fmt: skip
        results.append(result)
        progress({"type": "variant", "result": result.__dict__})
    logits.unlink(missing_ok=True)  # as large as n_ctx x chunks x vocabulary: never kept
    return Measured(results, n_ctx, chunks)


__all__ = ["Layout", "Measured", "QualityError", "VariantResult", "measure"]
