"""Benchmark cards: one sweep's results with everything needed to compare it later (hardware fingerprint,
engine and version, model and quantization, parameters), as JSON and Markdown under the data directory."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

from app import card_files
from app.api_types import LaunchRecord
from app.bench.load import RequestResult
from app.bench.prompts import LEGACY_PROMPT_MODE, mode_label

# 2: prompt modes, the engine's launch command, prompt and decode tokens/s, TTFT per turn. Cards of schema 1 are
# read as they are: they sent one prompt again and again (an `identical` run).
SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


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
    # Median over requests of prompt tokens / TTFT: how fast a prompt became a first token, waiting in line
    # included (at concurrency 1, the engine's prompt processing speed plus one decode step).
    prompt_tokens_per_s: float | None = None
    # Median over requests of output tokens after the first / the time after the first: one stream's decode speed.
    decode_tokens_per_s: float | None = None
    ttft_by_turn_s: list[float | None] | None = None  # multi-turn: mean TTFT of turn 1, 2, ...
    warm_cold_ratio: float | None = None  # multi-turn: mean TTFT of turns 2.. over that of turn 1

    @staticmethod
    def summarize(concurrency: int, results: list[RequestResult], duration_s: float) -> LevelResult:
        done = [r for r in results if r.error is None]
        ttfts = [r.ttft_s for r in done if r.ttft_s is not None]
        itls = [gap for r in done for gap in r.inter_token_latencies()]
        prompts = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
        output = sum(r.output_tokens for r in done)
        errors = [r.error for r in results if r.error is not None]
        prompt_rates = [r.prompt_tokens / r.ttft_s for r in done if r.prompt_tokens and r.ttft_s]
        decode_rates = [
            (r.output_tokens - 1) / (r.token_times[-1] - r.ttft_s)
            for r in done
            if r.ttft_s is not None and r.output_tokens > 1 and len(r.token_times) > 1 and r.token_times[-1] > r.ttft_s
        ]
        by_turn, ratio = _turns(done)
        return LevelResult(
            concurrency=concurrency, requests=len(results), completed=len(done), errors=len(errors),
            duration_s=duration_s, output_tokens=output,
            prompt_tokens_mean=sum(prompts) / len(prompts) if prompts else None,
            output_tokens_per_s=output / duration_s if duration_s > 0 else 0.0,
            request_rate=len(done) / duration_s if duration_s > 0 else 0.0,
            ttft_p50_s=percentile(ttfts, 0.5), ttft_p99_s=percentile(ttfts, 0.99),
            itl_p50_s=percentile(itls, 0.5), itl_p99_s=percentile(itls, 0.99),
            gain=None, first_error=errors[0] if errors else None,
            prompt_tokens_per_s=percentile(prompt_rates, 0.5), decode_tokens_per_s=percentile(decode_rates, 0.5),
            ttft_by_turn_s=by_turn, warm_cold_ratio=ratio,
        )  # fmt: skip


def _turns(done: list[RequestResult]) -> tuple[list[float | None] | None, float | None]:
    """Mean TTFT of each turn (None for a turn with no answer), and turns 2.. over turn 1; None, None when the
    requests had no turns."""
    turns = [r.turn for r in done if r.turn is not None]
    if not turns:
        return None, None
    by_turn = [_mean([r.ttft_s for r in done if r.turn == turn and r.ttft_s is not None])
               for turn in range(1, max(turns) + 1)]  # fmt: skip
    cold = by_turn[0]
    warm = _mean([r.ttft_s for r in done if r.turn is not None and r.turn > 1 and r.ttft_s is not None])
    return by_turn, (warm / cold if warm is not None and cold else None)


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


# The keys of a card's dicts that reading a saved card (listing, showing, comparing) relies on, checked when it is
# read; the dicts hold others too.
class _ModelKeys(TypedDict):
    id: str
    quantization: NotRequired[str | None]


class _EngineKeys(TypedDict):
    name: str
    version: NotRequired[str | None]
    launch: NotRequired[LaunchRecord | None]  # since schema 2


class _HardwareKeys(TypedDict):
    id: str


class _ParameterKeys(TypedDict):
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class BenchCard:
    """One benchmark run."""

    id: str
    created: str  # ISO 8601, UTC
    modeldeck_version: str
    model: Annotated[dict[str, Any], _ModelKeys]  # id, name, path, size_bytes, quantization
    # name, version, plan, launch (argv and environment, secrets redacted; schema 2)
    engine: Annotated[dict[str, Any], _EngineKeys]
    hardware: Annotated[dict[str, Any], _HardwareKeys]  # app.hardware.fingerprint.hardware_fingerprint()
    # concurrency, prompt_tokens, output_tokens, requests_per_level, endpoint; since schema 2 prompt_mode, seed,
    # prefix_tokens, conversations, turns, prompt_words, prompt_digest
    parameters: Annotated[dict[str, Any], _ParameterKeys]
    results: list[LevelResult]
    schema_version: int = SCHEMA_VERSION

    @property
    def prompt_mode(self) -> str:
        """How the prompts were chosen; `identical` for cards written before there was a choice."""
        return str(self.parameters.get("prompt_mode") or LEGACY_PROMPT_MODE)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> BenchCard:
        """The card saved as `data`; ValueError for one of another schema, or not of this shape."""
        return card_files.read_card(cls, data, "benchmark", READABLE_SCHEMAS, "level")

    def save(self, directory: Path) -> tuple[Path, Path]:
        """Write `<id>.json` and `<id>.md`, whole or not at all (CardSaveError); return both paths."""
        return card_files.write_card(directory, self.id, self.to_dict(), to_markdown(self))


def card_id(created_compact: str, model_id: str) -> str:
    return f"{created_compact}-{card_files.id_part(model_id)}"


def load_card(reference: str, directory: Path) -> BenchCard:
    """A card from a path to its JSON, or its id among the saved cards."""
    path = card_files.card_file(reference, directory)
    return BenchCard.from_dict(json.loads(path.read_text(encoding="utf-8")))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def results_table(levels: list[LevelResult]) -> list[str]:
    """The sweep as a Markdown table (also readable as plain text)."""
    lines = [
        "| concurrency | output tok/s | prompt tok/s | decode tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
        "| ITL p99 ms | errors | gain |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in levels:
        lines.append(
            f"| {r.concurrency} | {r.output_tokens_per_s:.1f} | {_rate(r.prompt_tokens_per_s)} | "
            f"{_rate(r.decode_tokens_per_s)} | {r.request_rate:.2f} | {_ms(r.ttft_p50_s)} | {_ms(r.ttft_p99_s)} | "
            f"{_ms(r.itl_p50_s)} | {_ms(r.itl_p99_s)} | {r.errors}/{r.requests} | {_ratio(r.gain)} |"
        )
    return lines


def turns_table(levels: list[LevelResult]) -> list[str]:
    """Multi-turn levels: mean TTFT of each turn and warm/cold; no lines for a run without turns."""
    with_turns = [r for r in levels if r.ttft_by_turn_s]
    if not with_turns:
        return []
    count = max(len(r.ttft_by_turn_s or []) for r in with_turns)
    lines = [
        "| concurrency | " + " | ".join(f"turn {t} TTFT ms" for t in range(1, count + 1)) + " | warm/cold |",
        "| ---: | " + " | ".join("---:" for _ in range(count)) + " | ---: |",
    ]
    for r in with_turns:
        turns = list(r.ttft_by_turn_s or []) + [None] * count
        cells = " | ".join(_ms(t) for t in turns[:count])
        lines.append(f"| {r.concurrency} | {cells} | {_ratio(r.warm_cold_ratio)} |")
    return lines


def prompts_text(card: BenchCard) -> str:
    """How a card's prompts were chosen, in words."""
    params, mode = card.parameters, card.prompt_mode
    text = mode_label(mode)
    if mode == "shared-prefix":
        text += f", {params.get('prefix_tokens')} tokens shared"
    elif mode == "multi-turn":
        conversations = params.get("conversations")
        if isinstance(conversations, list):
            conversations = "/".join(str(n) for n in conversations)  # per level
        text += f", {conversations} conversations of {params.get('turns')} turns"
    if "seed" in params:
        text += f", seed {params['seed']}"
    return text


def launch_text(engine: dict[str, Any]) -> str:
    """The engine's command line and the environment the service gave it, as one line."""
    launch = engine.get("launch")
    if not isinstance(launch, dict):
        return "not recorded"
    env = " ".join(f"{name}={value}" for name, value in sorted((launch.get("env") or {}).items()))
    return " ".join(filter(None, [env, shlex.join(launch.get("argv") or [])]))


def to_markdown(card: BenchCard) -> str:
    hw, params = card.hardware, card.parameters
    gpus = ", ".join(f"{g['name']} ({g['memory_total'] / 2**30:.0f} GiB)" for g in hw["gpus"]) or "none"
    # Since schema 2 the prompt's length is measured by the engine and met; before, it was a guess.
    about = "" if params.get("prompt_overhead_tokens") is not None else "about "
    lines = [
        f"# Benchmark: {card.model['id']}",
        "",
        f"- Created: {card.created} (ModelDeck {card.modeldeck_version})",
        f"- Model: {card.model['id']}, quantization {card.model.get('quantization') or 'unknown'}",
        f"- Engine: {card.engine['name']} {card.engine.get('version') or '(version unknown)'}, "
        f"plan {json.dumps(card.engine.get('plan'))}",
        f"- Hardware {hw['id']}: {hw['cpu'] or 'unknown CPU'}, {hw['logical_cores']} logical cores, "
        f"{(hw['ram_total'] or 0) / 2**30:.1f} GiB RAM, GPUs: {gpus}",
        f"- Parameters: concurrency {params['concurrency']}, {about}{params['prompt_tokens']} prompt tokens, "
        f"{params['output_tokens']} output tokens, {params['requests_per_level']} requests per level, "
        f"streamed {params['endpoint']}",
        f"- Prompts: {prompts_text(card)}",
        f"- Launch: `{launch_text(card.engine)}`",
        "",
        *results_table(card.results),
        "",
        "TTFT is the time to the first streamed chunk with generated content; ITL the gap between content chunks;",
        "gain is output tokens/s over that of the lowest concurrency; prompt tok/s the median of each request's",
        "prompt tokens over its TTFT; decode tok/s the median of each request's output tokens after the first over",
        "the time after the first.",
    ]
    turns = turns_table(card.results)
    if turns:
        lines += ["", "Multi-turn: mean TTFT per turn; warm/cold is the mean TTFT of turns 2.. over turn 1.", "",
                  *turns]  # fmt: skip
    errors = [f"- concurrency {r.concurrency}: {r.first_error}" for r in card.results if r.first_error]
    if errors:
        lines += ["", "First error of each level:", *errors]
    return "\n".join(lines) + "\n"


def _engine_text(card: BenchCard) -> str:
    return f"{card.engine['name']} {card.engine.get('version')}"


_COMPARED: tuple[tuple[str, Callable[[LevelResult], str]], ...] = (
    ("output tok/s", lambda r: f"{r.output_tokens_per_s:.1f}"),
    ("prompt tok/s", lambda r: _rate(r.prompt_tokens_per_s)),
    ("decode tok/s", lambda r: _rate(r.decode_tokens_per_s)),
    ("TTFT p50 ms", lambda r: _ms(r.ttft_p50_s)),
    ("TTFT p99 ms", lambda r: _ms(r.ttft_p99_s)),
    ("ITL p50 ms", lambda r: _ms(r.itl_p50_s)),
    ("ITL p99 ms", lambda r: _ms(r.itl_p99_s)),
    ("warm/cold", lambda r: _ratio(r.warm_cold_ratio)),
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
        ("prompts", prompts_text(a), prompts_text(b)),
        ("launch", launch_text(a.engine), launch_text(b.engine)),
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
    return card_files.side_by_side(compare_rows(a, b))
