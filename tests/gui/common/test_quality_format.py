"""How the window words quality figures: a loss is always labelled measured or published, unknown is a dash; a
card's row leaves the reference out of its variants; a run's status says where it stands."""

from __future__ import annotations

from app.gui.common.plan_text import plan_rows
from app.gui.common.quality_format import card_cells, loss_text, run_status

OPTION = {"engine": "llama-server", "variant": "Q4_0", "tier": "cpu", "context": 4096, "max_context": 8192,
          "decode_tokens_per_s": None, "memory": {"ram": 2**30, "vram_per_gpu": 0}}  # fmt: skip


def test_the_expected_loss_is_labelled_and_unknown_is_a_dash() -> None:
    measured = {"source": "measured", "label": "measured: PPL +12.79 % vs smollm2 (card c1)"}
    assert loss_text(measured).startswith("measured: PPL +12.79 %")
    assert loss_text({"source": "published", "label": "published: +0.4685 PPL on Llama-3-8B"}).startswith("published:")
    assert loss_text(None) == "\N{EM DASH}" and loss_text({"source": "measured"}) == "\N{EM DASH}"
    rows = dict(plan_rows({**OPTION, "quality_loss": measured}))
    assert rows["Expected quality loss"] == measured["label"]
    assert dict(plan_rows(OPTION))["Expected quality loss"] == "\N{EM DASH}"


def test_a_card_row_and_a_run_status() -> None:
    card = {"created": "2026-12-04T18:00:00+00:00", "model": "m", "reference": "m.q8", "text": "the user's text a.txt",
            "tokens": 254, "variants": [
                {"id": "m.q8", "quantization": "Q8_0", "ppl_increase_pct": 0.0, "kld_mean": 0.0,
                 "top_token_agreement": 1.0},
                {"id": "m.q4", "quantization": "Q4_0", "ppl_increase_pct": 12.5, "kld_mean": 0.25,
                 "top_token_agreement": 0.79}]}  # fmt: skip
    cells = card_cells(card)
    assert cells[0] == "2026-12-04 18:00:00" and cells[3] == "the user's text a.txt (254 tokens)"
    assert cells[4] == "Q4_0: +12.50 %, 0.2500, 79.0 %", "the reference is not listed among the variants"
    running = {"state": "running", "model": "m", "step": 1, "steps": 3, "variant": "m.q4", "chunk": 2, "chunks": 8}
    assert run_status(running) == "Measuring m, step 2 of 3: m.q4, chunk 2 of 8"
    assert run_status({"state": "failed", "error": "the text is too short"}) == "Failed: the text is too short"
    assert run_status({"state": "completed", "card_id": "c9"}) == "Done: card c9"
