"""Benchmark cards: one sweep's results with everything needed to compare it later (hardware fingerprint,
engine and version, model and quantization, parameters), as JSON and Markdown under the data directory."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.bench.load import RequestResult

SCHEMA_VERSION = 1


def percentile(values: list[float], fraction: float) -> float | None:
    """The nearest-rank percentile, None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level. Rates per second of wall time; latencies in seconds; unknown is None."""

    concurrency: int
    requests: int
    completed: int
    errors: int
    duration_s: float
    output_tokens: int
    prompt_tokens_mean: float | None
    output_tokens_per_s: float
    request_rate: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    gain: float | None  # output tokens/s over that of concurrency 1 (the lowest level swept)
    first_error: str | None

    @staticmethod
    def summarize(concurrency: int, results: list[RequestResult], duration_s: float) -> LevelResult:
        done = [r for r in results if r.error is None]
        ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
        itls = [gap for r in done for gap in r.inter_token_latencies()]
        prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
        output = sum(r.output_tokens for r in done)
        errors = [r.error for r in results if r.error is not None]
        return LevelResult(
            concurrency=concurrency, requests=len(results), completed=len(done), errors=len(errors),
            duration_s=duration_s, output_tokens=output,
            prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
            output_tokens_per_s=output / duration_s if duration_s > 0 else 0.0,
            request_rate=len(done) / duration_s if duration_s > 0 else 0.0,
            ttft_p50_s=percentile(ttfts, 0.5), ttft_p99_s=percentile(ttfts, 0.99),
            itl_p50_s=percentile(itls, 0.5), itl_p99_s=percentile(itls, 0.99),
            gain=None, first_error=errors[0] if errors else None,
        )  # fmt: skip


def with_gains(levels: list[LevelResult]) -> list[LevelResult]:
    """Each level with its throughput gain over the lowest concurrency level."""
    if not levels:
        return levels
    base = min(levels, key=lambda level: level.concurrency).output_tokens_per_s
    gained = []
    for level in levels:
        gain = level.output_tokens_per_s / base if base > 0 else None
        gained.append(LevelResult(**{**asdict(level), "gain": gain}))
    return gained


def hardware_fingerprint(hardware: dict[str, Any]) -> dict[str, Any]:
    """The facts of a hardware profile that decide speed, and a short hash of them to match cards by machine."""
    cpu = hardware.get("cpu") or {}
    facts = {
        "cpu": cpu.get("model"),
        "logical_cores": cpu.get("logical_cores"),
        "physical_cores": cpu.get("physical_cores"),
        "ram_total": hardware.get("ram_total"),
        "gpus": [{"name": g.get("name"), "memory_total": g.get("memory_total")} for g in hardware.get("gpus", [])],
        "driver_version": hardware.get("driver_version"),
        "cuda_version": hardware.get("cuda_version"),
        "os": hardware.get("os"),
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return {"id": digest, **facts}


@dataclass(frozen=True)
class BenchCard:
    """One benchmark run."""

    id: str
    created: str  # ISO 8601, UTC
    modeldeck_version: str
    model: dict[str, Any]  # id, name, path, size_bytes, quantization
    engine: dict[str, Any]  # name, version, plan
    hardware: dict[str, Any]  # hardware_fingerprint()
    parameters: dict[str, Any]  # concurrency, prompt_tokens, output_tokens, requests_per_level, endpoint
    results: list[LevelResult]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchCard:
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"benchmark card schema {data.get('schema_version')} is not {SCHEMA_VERSION}")
        return cls(**{**data, "results": [LevelResult(**level) for level in data["results"]]})

    def save(self, directory: Path) -> tuple[Path, Path]:
        """Write `<id>.json` and `<id>.md`; return both paths."""
        directory.mkdir(parents=True, exist_ok=True)
        json_path, md_path = directory / f"{self.id}.json", directory / f"{self.id}.md"
        json_path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        md_path.write_text(to_markdown(self), encoding="utf-8")
        return json_path, md_path


def card_id(created_compact: str, model_id: str) -> str:
    return f"{created_compact}-{re.sub(r'[^A-Za-z0-9._-]+', '_', model_id)[:60]}"


def load_card(reference: str, directory: Path) -> BenchCard:
    """A card from a path to its JSON, or its id among the saved cards."""
    path = Path(reference)
    if not path.is_file():
        path = directory / (reference if reference.endswith(".json") else f"{reference}.json")
    return BenchCard.from_dict(json.loads(path.read_text(encoding="utf-8")))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def results_table(levels: list[LevelResult]) -> list[str]:
    """The sweep as a Markdown table (also readable as plain text)."""
    lines = [
        "| concurrency | output tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | errors | gain |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in levels:
        gain = "-" if r.gain is None else f"{r.gain:.2f}x"
        lines.append(
            f"| {r.concurrency} | {r.output_tokens_per_s:.1f} | {r.request_rate:.2f} | {_ms(r.ttft_p50_s)} | "
            f"{_ms(r.ttft_p99_s)} | {_ms(r.itl_p50_s)} | {_ms(r.itl_p99_s)} | {r.errors}/{r.requests} | {gain} |"
        )
    return lines


def to_markdown(card: BenchCard) -> str:
    hw, params = card.hardware, card.parameters
    gpus = ", ".join(f"{g['name']} ({g['memory_total'] / 2**30:.0f} GiB)" for g in hw["gpus"]) or "none"
    lines = [
        f"# Benchmark: {card.model['id']}",
        "",
        f"- Created: {card.created} (ModelDeck {card.modeldeck_version})",
        f"- Model: {card.model['id']}, quantization {card.model.get('quantization') or 'unknown'}",
        f"- Engine: {card.engine['name']} {card.engine.get('version') or '(version unknown)'}, "
        f"plan {json.dumps(card.engine.get('plan'))}",
        f"- Hardware {hw['id']}: {hw['cpu']}, {hw['logical_cores']} logical cores, "
        f"{(hw['ram_total'] or 0) / 2**30:.1f} GiB RAM, GPUs: {gpus}",
        f"- Parameters: concurrency {params['concurrency']}, about {params['prompt_tokens']} prompt tokens, "
        f"{params['output_tokens']} output tokens, {params['requests_per_level']} requests per level, "
        f"streamed {params['endpoint']}",
        "",
        *results_table(card.results),
        "",
        "TTFT is the time to the first streamed chunk with generated content; ITL the gap between content chunks;",
        "gain is output tokens/s over that of the lowest concurrency.",
    ]
    errors = [f"- concurrency {r.concurrency}: {r.first_error}" for r in card.results if r.first_error]
    if errors:
        lines += ["", "First error of each level:", *errors]
    return "\n".join(lines) + "\n"


def _engine_text(card: BenchCard) -> str:
    return f"{card.engine['name']} {card.engine.get('version')}"


_COMPARED: tuple[tuple[str, Callable[[LevelResult], str]], ...] = (
    ("output tok/s", lambda r: f"{r.output_tokens_per_s:.1f}"),
    ("TTFT p50 ms", lambda r: _ms(r.ttft_p50_s)),
    ("TTFT p99 ms", lambda r: _ms(r.ttft_p99_s)),
    ("ITL p50 ms", lambda r: _ms(r.itl_p50_s)),
    ("ITL p99 ms", lambda r: _ms(r.itl_p99_s)),
    ("errors", lambda r: f"{r.errors}/{r.requests}"),
)


def compare_rows(a: BenchCard, b: BenchCard) -> list[tuple[str, str, str]]:
    """Two cards side by side as (what, A, B) rows: their setup, then each level's figures."""
    rows = [
        ("card", a.id, b.id),
        ("model", a.model["id"], b.model["id"]),
        ("quantization", str(a.model.get("quantization")), str(b.model.get("quantization"))),
        ("engine", _engine_text(a), _engine_text(b)),
        ("hardware", a.hardware["id"], b.hardware["id"]),
        ("prompt/output tokens", f"{a.parameters['prompt_tokens']}/{a.parameters['output_tokens']}",
         f"{b.parameters['prompt_tokens']}/{b.parameters['output_tokens']}"),
    ]  # fmt: skip
    levels_a = {r.concurrency: r for r in a.results}
    levels_b = {r.concurrency: r for r in b.results}
    for level in sorted(levels_a.keys() | levels_b.keys()):
        ra, rb = levels_a.get(level), levels_b.get(level)
        for label, read in _COMPARED:
            rows.append((f"c={level} {label}", read(ra) if ra else "-", read(rb) if rb else "-"))
    return rows


def compare(a: BenchCard, b: BenchCard) -> str:
    """Two cards side by side as text: what differs in their setup, then each level's figures for A and B."""
    rows = compare_rows(a, b)
    width = max(len(row[0]) for row in rows)
    column = max(len(row[1]) for row in rows)
    return "\n".join(f"{name:<{width}}  {left:>{column}}  {right}" for name, left, right in rows) + "\n"
