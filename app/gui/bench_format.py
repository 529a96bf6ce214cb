"""Words and table cells for the Benchmark page, from the service's run and card records (no Qt here)."""

from __future__ import annotations

from typing import Any

MAX_CONCURRENCY = 4096  # the service's bound; it checks again and says so
LEVEL_COLUMNS = (
    "Concurrency", "Output tok/s", "Req/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms", "Errors",
    "Gain",
)  # fmt: skip
CARD_COLUMNS = ("Created", "Model", "Levels", "Best tok/s", "Errors")
_PHASES = {
    "starting": "Starting the benchmark\N{HORIZONTAL ELLIPSIS}",
    "model": "Starting the model\N{HORIZONTAL ELLIPSIS}",
    "warmup": "Warming up\N{HORIZONTAL ELLIPSIS}",
    "saving": "Saving the card\N{HORIZONTAL ELLIPSIS}",
}


def parse_levels(text: str) -> list[int]:
    """ "1, 4,16" -> [1, 4, 16]; a ValueError that says what is expected otherwise."""
    parts = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()]
    if not parts or any(not part.isdigit() or not 1 <= int(part) <= MAX_CONCURRENCY for part in parts):
        raise ValueError(f"Concurrency levels are whole numbers from 1 to {MAX_CONCURRENCY}, such as 1,4,16,64.")
    return [int(part) for part in parts]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def level_cells(level: dict[str, Any]) -> list[str]:
    """One row of the results table, in LEVEL_COLUMNS order."""
    gain = level.get("gain")
    return [
        str(level["concurrency"]),
        f"{level['output_tokens_per_s']:.1f}",
        f"{level['request_rate']:.2f}",
        _ms(level.get("ttft_p50_s")),
        _ms(level.get("ttft_p99_s")),
        _ms(level.get("itl_p50_s")),
        _ms(level.get("itl_p99_s")),
        f"{level['errors']}/{level['requests']}",
        "-" if gain is None else f"{gain:.2f}x",
    ]


def card_cells(card: dict[str, Any]) -> list[str]:
    """One row of the saved cards list, in CARD_COLUMNS order, from a GET /api/bench summary."""
    best = card.get("best_output_tokens_per_s")
    return [
        str(card.get("created", "")).replace("T", " ").rstrip("Z"),
        str(card.get("model", "")),
        ",".join(str(level) for level in card.get("concurrency") or []),
        "-" if best is None else f"{best:.1f}",
        str(card.get("errors", 0)),
    ]


def run_status(run: dict[str, Any]) -> str:
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
