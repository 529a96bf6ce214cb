"""The wizard's speed corrected by what this machine measured: a benchmark card first, else earlier requests."""

from __future__ import annotations

from app.gui.wizard.measured_speed import MeasuredSpeed, from_card, from_requests, speed_words


def record(model: str, tps: float | None) -> dict[str, object]:
    return {"model": model, "decode_tps": tps, "stream": True}


def test_earlier_requests_give_their_median_from_three_on() -> None:
    records = [record("a", 30.0), record("b", 90.0), record("a", 12.0), record("a", None), record("a", 35.0)]
    assert from_requests(records, "a") == MeasuredSpeed(30.0, "the median of 3 earlier requests of this model")
    assert from_requests(records[:3], "a") is None  # two measured answers say too little


def test_a_benchmark_card_gives_its_one_stream_decode_speed() -> None:
    card = {"id": "20260101-120000-smol", "results": [
        {"concurrency": 4, "decode_tokens_per_s": 20.0}, {"concurrency": 1, "decode_tokens_per_s": 41.5},
    ]}  # fmt: skip
    assert from_card(card) == MeasuredSpeed(41.5, "benchmark 20260101-120000-smol at one stream")
    assert from_card({"id": "x", "results": [{"concurrency": 1, "decode_tokens_per_s": None}]}) is None


def test_the_speed_says_which_figure_it_is() -> None:
    measured = MeasuredSpeed(23.4, "the median of 5 earlier requests of this model")
    assert speed_words(84.0, measured) == (
        "23 tokens/s for one stream, measured here (the median of 5 earlier requests of this model); "
        "the estimate was 84"
    )
    assert "an estimate: nothing measured here yet" in speed_words(84.0, None)
    assert speed_words(None, None).startswith("unknown")
