"""The expected quality loss the recommendation shows: a quality card's measured figure for the variant it holds,
llama.cpp's published figure for a type without one (labelled so), nothing for a type with neither; and the
user's threshold ranking a variant whose measured loss passes it below one that fits with less loss. Recorded
hardware (tests/fixtures/hardware) and the published Llama-3-8B variants; the cards are written as files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app.hardware.profile import HardwareProfile
from app.planner.recommend import recommend
from app.quality.card import QualityCard
from app.quality.expected import lookup, over_threshold
from app.quality.measure import VariantResult
from app.settings import Settings, SettingsError
from tests.app.planner.test_planner import GGUF_8B

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hardware"


def result(variant_id: str, quantization: str, ratio: float, reference: bool = False) -> VariantResult:
    return VariantResult(variant_id, quantization, 1, reference, 10 * ratio, 0.1, ratio, (ratio - 1) / 10,
                         None, None, 1 - (ratio - 1), 1.0, None)  # fmt: skip


def card(card_id: str, results: list[VariantResult]) -> QualityCard:
    return QualityCard(card_id, "2026-12-04T18:00:00+00:00", "0.1.0", "llama-3-8b", results[0].id, {}, {},
                       {"description": "the user's text q3.txt", "tokens": 1000}, results)  # fmt: skip


CARD = card("c1", [result("llama-3-8b.f16", "F16", 1.0, True), result("llama-3-8b.q8_0", "Q8_0", 1.001),
                   result("llama-3-8b.q6_k", "Q6_K", 1.30)])  # fmt: skip


def test_measured_wins_over_published_and_unknown_stays_unknown() -> None:
    expected = lookup([card("newer", [result("llama-3-8b.f16", "F16", 1.0, True),
                                      result("llama-3-8b.q8_0", "Q8_0", 1.002)]), CARD])  # fmt: skip
    q8 = expected("/models/Llama-3-8B.Q8_0.gguf", "Q8_0")
    assert q8 is not None and q8["source"] == "measured" and q8["card"] == "newer", "the newest card wins"
    assert abs(q8["ppl_increase_pct"] - 0.2) < 1e-9 and "measured" in q8["label"]
    # A Hub file of the same model and type matches by name.
    hub = expected("bartowski/Llama-3-8B-GGUF/Llama-3-8B-Q6_K.gguf", None)
    assert hub is not None and hub["source"] == "measured" and hub["card"] == "c1"
    q4 = expected("/models/Llama-3-8B.Q4_K_M.gguf", "Q4_K_M")
    assert q4 is not None and q4["source"] == "published" and q4["ppl_increase"] == 0.1754
    assert q4["label"].startswith("published: +0.1754 PPL on Llama-3-8B")
    assert expected("/models/Llama-3-8B.IQ4_XS.gguf", "IQ4_XS") is None
    assert expected("/models/other-model.Q8_0.gguf", "Q8_0")["source"] == "published", "another model's card"  # type: ignore[index]


def test_a_measured_loss_past_the_threshold_ranks_lower() -> None:
    hardware = HardwareProfile.from_dict(json.loads((FIXTURES / "rtx4090_24gb.json").read_text()))
    # Q8_0 and Q6_K both fit a 24 GB GPU; by bits Q8_0 is first.
    chosen = [replace(v, location=f"/models/Llama-3-8B.{v.name}.gguf") for v in GGUF_8B if v.name in ("Q8_0", "Q6_K")]
    plain = recommend(hardware, chosen, quality=lookup([CARD]))
    assert plain.best is not None and plain.best.variant == "Q8_0"
    assert plain.best.quality_loss is not None and plain.best.quality_loss["source"] == "measured"
    # Now Q8_0's card says +30 %: past a 5 % threshold, so Q6_K (+0.1 %) comes first and Q8_0 says why.
    lossy = card("c2", [result("llama-3-8b.f16", "F16", 1.0, True), result("llama-3-8b.q8_0", "Q8_0", 1.30),
                        result("llama-3-8b.q6_k", "Q6_K", 1.001)])  # fmt: skip
    ranked = recommend(hardware, chosen, quality=lookup([lossy]), max_loss_pct=5.0)
    assert ranked.best is not None and ranked.best.variant == "Q6_K"
    held = next(o for o in ranked.alternatives if o.variant == "Q8_0")
    assert held.fits and any("passes the threshold of 5.0 %" in r for r in held.reasons)
    # Without a threshold, or with a published figure only, nothing is held back.
    assert recommend(hardware, chosen, quality=lookup([lossy])).best.variant == "Q8_0"  # type: ignore[union-attr]
    assert not over_threshold({"source": "published", "ppl_increase": 9.0}, 0.0)


def test_the_threshold_is_a_setting_checked_like_the_others() -> None:
    assert Settings().max_quality_loss_pct is None, "no threshold unless the user sets one"
    assert Settings().updated({"max_quality_loss_pct": 5}).max_quality_loss_pct == 5.0
    assert Settings().updated({"max_quality_loss_pct": None}).max_quality_loss_pct is None
    for bad in (-1, 1001, "5", True):
        with pytest.raises(SettingsError, match="percentage from 0 to 1000"):
            Settings().updated({"max_quality_loss_pct": bad})
