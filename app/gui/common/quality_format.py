"""Quality figures as the window shows them: a variant's expected loss, measured or published, always labelled."""

from __future__ import annotations

from typing import Any

from app.api_types import QualityRunRecord


def loss_text(loss: dict[str, Any] | None) -> str:
    """`measured: PPL +1.23 % vs ...` or `published: +0.4685 PPL on Llama-3-8B ...`; a dash when unknown."""
    if not isinstance(loss, dict):
        return "\N{EM DASH}"
    label = loss.get("label")
    return str(label) if label else "\N{EM DASH}"


def percent(value: float | None, digits: int = 2) -> str:
    return "\N{EM DASH}" if value is None else f"{value:+.{digits}f} %"


CARD_COLUMNS = ("Created", "Model", "Reference", "Text", "Variants (PPL change, mean KLD, top-token agreement)")


def _variant_text(variant: dict[str, Any]) -> str:
    increase, kld, agreement = (
        variant.get("ppl_increase_pct"),
        variant.get("kld_mean"),
        variant.get("top_token_agreement"),
    )
    figures = [percent(increase), "\N{EM DASH}" if kld is None else f"{kld:.4f}",
               "\N{EM DASH}" if agreement is None else f"{agreement * 100:.1f} %"]  # fmt: skip
    return f"{variant.get('quantization') or variant.get('id')}: {', '.join(figures)}"


def card_cells(card: dict[str, Any]) -> list[str]:
    """A saved quality card's row (GET /api/quality's summary); the reference itself is left out of the variants."""
    others = [v for v in card.get("variants") or [] if v.get("id") != card.get("reference")]
    text = f"{card.get('text')} ({card.get('tokens')} tokens)"
    return [str(card.get("created", ""))[:19].replace("T", " "), str(card.get("model")), str(card.get("reference")),
            text, "; ".join(_variant_text(v) for v in others)]  # fmt: skip


def run_results_text(run: QualityRunRecord) -> str:
    """The variants a run has measured so far, as in a card's row: still there when its card could not be saved."""
    measured = [{**r, "ppl_increase_pct": None if r.get("ppl_ratio") is None else (r["ppl_ratio"] - 1) * 100}
                for r in run.get("results") or [] if not r.get("reference")]  # fmt: skip
    return "; ".join(_variant_text(v) for v in measured)


def run_status(run: QualityRunRecord) -> str:
    """One line on where a quality run stands."""
    state = run.get("state")
    if state == "running":
        where = f"step {int(run.get('step') or 0) + 1} of {run.get('steps') or '?'}"
        variant = f": {run['variant']}" if run.get("variant") else ""
        chunks = f", chunk {run['chunk']} of {run['chunks']}" if run.get("chunks") else ""
        return f"Measuring {run.get('model')}, {where}{variant}{chunks}"
    if state == "completed":
        return f"Done: card {run.get('card_id')}"
    if state == "cancelled":
        return "Cancelled."
    return f"Failed: {run.get('error') or 'see the service log'}"
