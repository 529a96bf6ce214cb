"""Words and table cells for the Benchmark page, from the service's run and card records (no Qt here)."""

from __future__ import annotations

from app.api_types import BenchCardSummary, BenchLevel, BenchRunRecord
from app.bench.levels import MAX_CONCURRENCY, parse_concurrency

LEVEL_COLUMNS = (
    "Concurrency", "Output tok/s", "Prompt tok/s", "Decode tok/s", "Req/s", "TTFT p50 ms", "TTFT p99 ms",
    "ITL p50 ms", "ITL p99 ms", "Errors", "Gain", "TTFT by turn ms", "Warm/cold",
)  # fmt: skip
CARD_COLUMNS = ("Created", "Model", "Prompts", "Levels", "Best tok/s", "Errors")
# The modes the page offers, as the service names them, with what each one measures.
PROMPT_MODES = (
    ("unique", "Unique: each request its own prompt"),
    ("shared-prefix", "Shared prefix, then each request its own words"),
    ("multi-turn", "Multi-turn conversations, interleaved"),
    ("identical", "Identical: one prompt for all (measures the prompt cache)"),
)
_PHASES = {
    "starting": "Starting the benchmark\N{HORIZONTAL ELLIPSIS}",
    "model": "Starting the model\N{HORIZONTAL ELLIPSIS}",
    "warmup": "Warming up\N{HORIZONTAL ELLIPSIS}",
    "saving": "Saving the card\N{HORIZONTAL ELLIPSIS}",
}


def parse_levels(text: str) -> list[int]:
    """ "1, 4,16" or "1 4 16" -> [1, 4, 16], read as the service reads them; a ValueError that says what is
    expected otherwise."""
    try:
        return list(parse_concurrency(text.replace(" ", ",")))
    except ValueError:
        raise ValueError(
            f"Concurrency levels are whole numbers from 1 to {MAX_CONCURRENCY}, such as 1,4,16,64."
        ) from None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def level_cells(level: BenchLevel) -> list[str]:
    """One row of the results table, in LEVEL_COLUMNS order. Levels of cards older than prompt modes lack the
    prompt and decode rates and the turns: "-"."""
    gain, ratio, turns = level.get("gain"), level.get("warm_cold_ratio"), level.get("ttft_by_turn_s")
    return [
        str(level["concurrency"]),
        f"{level['output_tokens_per_s']:.1f}",
        _rate(level.get("prompt_tokens_per_s")),
        _rate(level.get("decode_tokens_per_s")),
        f"{level['request_rate']:.2f}",
        _ms(level.get("ttft_p50_s")),
        _ms(level.get("ttft_p99_s")),
        _ms(level.get("itl_p50_s")),
        _ms(level.get("itl_p99_s")),
        f"{level['errors']}/{level['requests']}",
        "-" if gain is None else f"{gain:.2f}x",
        " / ".join(f"{_ms(turn)}" for turn in turns) if turns else "-",
        "-" if ratio is None else f"{ratio:.2f}x",
    ]


def card_cells(card: BenchCardSummary) -> list[str]:
    """One row of the saved cards list, in CARD_COLUMNS order, from a GET /api/bench summary."""
    best = card.get("best_output_tokens_per_s")
    return [
        str(card.get("created", "")).replace("T", " ").rstrip("Z"),
        str(card.get("model", "")),
        str(card.get("prompt_mode") or "identical"),  # an older service lists no mode: it sent one prompt
        ",".join(str(level) for level in card.get("concurrency") or []),
        "-" if best is None else f"{best:.1f}",
        str(card.get("errors", 0)),
    ]


def run_status(run: BenchRunRecord) -> str:
    """Where a run stands, in words."""
    state, model = run["state"], run["model"]
    if state == "completed":
        return f"Done: {model}, saved as card {run['card_id']}."
    if state == "cancelled":
        return f"Cancelled: {model}; no card was saved."
    if state == "failed":
        return f"The benchmark of {model} failed: {run.get('error') or 'no reason given'}"
    index = run.get("level_index")
    if run["phase"] == "level" and index is not None:
        levels, requests = run["concurrency"], run["requests_per_level"]
        return (f"Concurrency {levels[index]} (level {index + 1} of {len(levels)}): "
                f"{run['level_done']} of {requests[index]} requests done")  # fmt: skip
    return _PHASES.get(run["phase"], f"{run['phase']}\N{HORIZONTAL ELLIPSIS}")
