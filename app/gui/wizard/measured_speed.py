"""What this machine measured of a model's decode speed before: its newest benchmark card at one stream, else the
median of its earlier streamed requests in the request log. The wizard shows it beside the planner's estimate,
which comes from memory bandwidth alone and can be several times off."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from app.api_types import BenchCardRecord, RequestRecord
from app.client import ControlClient

MIN_REQUESTS = 3  # fewer earlier requests than this say too little to correct an estimate
RECENT_REQUESTS = 1000


@dataclass(frozen=True)
class MeasuredSpeed:
    """One stream's decode speed measured here, and where it comes from, in words."""

    tokens_per_s: float
    source: str


def from_requests(records: list[RequestRecord], model_id: str) -> MeasuredSpeed | None:
    """The median decode speed of the model's earlier answers (streamed or not) that measured one."""
    rates = [rate for r in records if r["model"] == model_id and (rate := r["decode_tps"])]
    if len(rates) < MIN_REQUESTS:
        return None
    return MeasuredSpeed(statistics.median(rates), f"the median of {len(rates)} earlier requests of this model")


def from_card(card: BenchCardRecord) -> MeasuredSpeed | None:
    """A benchmark card's decode speed at its lowest concurrency (one stream, where it ran one)."""
    levels = [level for level in card["results"] if level["decode_tokens_per_s"]]
    if not levels:
        return None
    lowest = min(levels, key=lambda level: level["concurrency"])
    streams = "one stream" if lowest["concurrency"] == 1 else f"{lowest['concurrency']} streams"
    return MeasuredSpeed(float(lowest["decode_tokens_per_s"] or 0), f"benchmark {card['id']} at {streams}")


def measured_speed(client: ControlClient, model_id: str) -> MeasuredSpeed | None:
    """Blocking (service calls): the newest benchmark card of the model, else its earlier requests; None: none."""
    cards = [c for c in client.bench().get("cards", []) if c.get("model") == model_id]
    for summary in cards[:1]:  # newest first
        found = from_card(client.bench_card(str(summary["id"])))
        if found is not None:
            return found
    return from_requests(client.requests(RECENT_REQUESTS), model_id)


def speed_words(predicted: float | None, measured: MeasuredSpeed | None) -> str:
    """The speed to expect, corrected by the measurement where there is one, saying which figure is which."""
    if measured is None:
        if predicted is None:
            return "unknown: no memory bandwidth figure and no measurement here"
        return f"about {predicted:.0f} tokens/s for one stream (an estimate: nothing measured here yet)"
    estimate = f"; the estimate was {predicted:.0f}" if predicted is not None else ""
    return f"{measured.tokens_per_s:.0f} tokens/s for one stream, measured here ({measured.source}){estimate}"


__all__ = ["MeasuredSpeed", "from_card", "from_requests", "measured_speed", "speed_words"]
