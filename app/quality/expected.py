"""The expected quality loss of a variant, as the recommendation, the wizard and Discover show it: the measured
figure of the newest quality card that holds this variant (the same model's file of the same type), else the
figure llama.cpp publishes for its type, labelled as published. Unknown is None."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from app.hub.variants import quant_of
from app.paths import AppPaths
from app.quality.card import QualityCard
from app.quality.family import family_key
from app.quality.published import SOURCE, published_loss

Lookup = Callable[[str, str | None], dict[str, Any] | None]


def _key(name: str, quantization: str | None) -> tuple[str, str | None]:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = base if base.lower().endswith(".gguf") else f"{base}.gguf"
    return family_key(base), (quantization or quant_of(base) or "").upper() or None


def measured_table(cards: Iterable[QualityCard]) -> dict[tuple[str, str | None], dict[str, Any]]:
    """Each measured variant's figures by (model family, type); `cards` newest first, so the newest card wins."""
    table: dict[tuple[str, str | None], dict[str, Any]] = {}
    for card in cards:
        for result in card.results:
            key = _key(result.id, result.quantization)
            if key[1] is None or key in table:
                continue
            table[key] = {
                "source": "measured",
                "card": card.id,
                "reference": card.reference,
                "is_reference": result.reference,
                "ppl_increase_pct": result.ppl_increase_pct,
                "kld_mean": result.kld_mean,
                "top_token_agreement": result.top_token_agreement,
                "text": card.text.get("description"),
                "label": _measured_label(card, result.reference, result.ppl_increase_pct, result.kld_mean),
            }
    return table


def _measured_label(card: QualityCard, is_reference: bool, increase: float | None, kld: float | None) -> str:
    if is_reference:
        return f"measured: the reference of quality card {card.id}"
    change = "?" if increase is None else f"{increase:+.2f} %"
    divergence = "" if kld is None else f", KLD {kld:.4f}"
    return f"measured: PPL {change} vs {card.reference}{divergence} (card {card.id})"


def lookup(cards: Iterable[QualityCard]) -> Lookup:
    """`expected(location, quantization)`: the measured figure when a card has it, else the published one."""
    table = measured_table(cards)

    def expected(location: str, quantization: str | None) -> dict[str, Any] | None:
        key = _key(location, quantization)
        if key in table:
            return table[key]
        published = published_loss(key[1])
        if published is None:
            return None
        label = f"published: {published.ppl_increase:+.4f} PPL on {published.measured_on} ({SOURCE})"
        return {
            "source": "published",
            "quantization": published.quantization,
            "ppl_increase": published.ppl_increase,
            "measured_on": published.measured_on,
            "label": label,
        }

    return expected


def over_threshold(loss: dict[str, Any] | None, max_loss_pct: float | None) -> bool:
    """A measured loss past the user's threshold (a published figure is never held against a variant: it is
    another model's)."""
    if loss is None or max_loss_pct is None or loss.get("source") != "measured":
        return False
    increase = loss.get("ppl_increase_pct")
    return isinstance(increase, int | float) and increase > max_loss_pct


def quality_lookup(paths: AppPaths, max_loss_pct: float | None = None) -> tuple[Lookup, float | None]:
    """The lookup over the saved cards, and the threshold: `max_loss_pct` when given, else the user's setting."""
    from app.quality.card import quality_dir, saved_cards
    from app.settings import load_settings

    if max_loss_pct is None:
        max_loss_pct = load_settings(paths).settings.max_quality_loss_pct
    return lookup(saved_cards(quality_dir(paths))), max_loss_pct
