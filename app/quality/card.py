"""Quality cards: one run's figures with what is needed to read them later (hardware, tool version, variants,
text source and size), as JSON and Markdown beside each other under the data directory, like benchmark cards."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from app import card_files
from app.paths import AppPaths
from app.quality.measure import VariantResult

SCHEMA_VERSION = 1


def quality_dir(paths: AppPaths) -> Path:
    """Where quality cards are kept."""
    return paths.data / "quality"


def card_id(created_compact: str, model_id: str) -> str:
    return f"{created_compact}-quality-{card_files.id_part(model_id)}"


class _TextKeys(TypedDict):
    """The keys of a card's `text` that reading a saved card (listing, showing, comparing) relies on, checked when
    it is read; it holds others too."""

    description: str
    tokens: int


@dataclass(frozen=True)
class QualityCard:
    """One quality run."""

    id: str
    created: str  # ISO 8601, UTC
    modeldeck_version: str
    model: str  # the model id the run was asked for
    reference: str  # the id of the variant the others are compared with
    tool: dict[str, Any]  # name, version (llama-cpp-python's), backend, folder
    hardware: dict[str, Any]  # app.hardware.fingerprint.hardware_fingerprint()
    # kind (user, default), description, path, chars, sha256, tokens, n_ctx, chunks
    text: Annotated[dict[str, Any], _TextKeys]
    results: list[VariantResult]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> QualityCard:
        """The card saved as `data`; ValueError for one of another schema, or not of this shape."""
        return card_files.read_card(cls, data, "quality", (SCHEMA_VERSION,), "result")

    def result(self, variant_id: str) -> VariantResult | None:
        return next((r for r in self.results if r.id == variant_id), None)

    def save(self, directory: Path) -> tuple[Path, Path]:
        """Write `<id>.json` and `<id>.md`, whole or not at all (CardSaveError); return both paths."""
        return card_files.write_card(directory, self.id, self.to_dict(), to_markdown(self))


def load_card(reference: str, directory: Path) -> QualityCard:
    """A card from a path to its JSON, or its id among the saved cards."""
    path = card_files.card_file(reference, directory, check_id=True)
    return QualityCard.from_dict(json.loads(path.read_text(encoding="utf-8")))


def saved_cards(directory: Path, limit: int = card_files.MAX_LISTED) -> list[QualityCard]:
    """The readable saved cards, newest first (an unreadable one is left out, with a warning naming it)."""
    return card_files.saved_cards(directory, QualityCard.from_dict, limit)


def _num(value: float | None, pattern: str = "{:.4f}") -> str:
    return "-" if value is None else pattern.format(value)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f} %"


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f}"


def results_table(results: list[VariantResult]) -> list[str]:
    """The variants as a Markdown table (also readable as plain text), reference first."""
    lines = [
        "| variant | type | size MiB | PPL | PPL vs ref | mean KLD | KLD p99 | top-token agreement | seconds "
        "| peak MiB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        change = "reference" if r.reference else _num(r.ppl_increase_pct, "{:+.2f} %")
        lines.append(
            f"| {r.id} | {r.quantization or '?'} | {r.size_bytes / 2**20:.0f} | {_num(r.perplexity)} | {change} "
            f"| {_num(r.kld_mean, '{:.5f}')} | {_num(r.kld_p99, '{:.4f}')} | {_pct(r.top_token_agreement)} "
            f"| {r.seconds:.1f} | {_mib(r.peak_rss_bytes)} |"
        )
    return lines


def to_markdown(card: QualityCard) -> str:
    hw, text, tool = card.hardware, card.text, card.tool
    lines = [
        f"# Quality: {card.model}",
        "",
        f"- Created: {card.created} (ModelDeck {card.modeldeck_version})",
        f"- Reference: {card.reference} (the others are compared with its logits)",
        f"- Tool: llama-perplexity from llama-cpp-python {tool.get('version') or '(version unknown)'} "
        f"({tool.get('backend') or 'backend unknown'})",
        f"- Hardware {hw.get('id')}: {hw.get('cpu') or 'unknown CPU'}, {hw.get('logical_cores')} logical cores",
        f"- Text: {text['description']}, {text['chars']} characters, sha256 {str(text['sha256'])[:16]}; "
        f"{text['tokens']} tokens scored in {text['chunks']} chunks of {text['n_ctx']}",
        "",
        *results_table(card.results),
        "",
        "PPL is the perplexity on the text (lower is better); PPL vs ref its change over the reference's on the",
        "same tokens; KLD the Kullback-Leibler divergence of each token's distribution from the reference's;",
        "top-token agreement how often both put the same token first. Seconds and peak memory are the tool's run",
        "for that variant, model load included.",
    ]
    return "\n".join(lines) + "\n"


_COMPARED: tuple[tuple[str, str], ...] = (
    ("PPL", "perplexity"),
    ("PPL vs ref %", "ppl_increase_pct"),
    ("mean KLD", "kld_mean"),
    ("top-token agreement", "top_token_agreement"),
    ("seconds", "seconds"),
    ("peak MiB", "peak_rss_bytes"),
)


def _cell(result: VariantResult | None, attribute: str) -> str:
    if result is None:
        return "-"
    value = getattr(result, attribute)
    if attribute == "peak_rss_bytes":
        return _mib(value)
    if attribute == "top_token_agreement":
        return _pct(value)
    return _num(value)


def compare_rows(a: QualityCard, b: QualityCard) -> list[tuple[str, str, str]]:
    """Two cards side by side as (what, A, B) rows: their setup, then each variant's figures."""
    rows = [
        ("card", a.id, b.id),
        ("model", a.model, b.model),
        ("reference", a.reference, b.reference),
        ("text", a.text["description"], b.text["description"]),
        ("tokens", str(a.text["tokens"]), str(b.text["tokens"])),
        ("hardware", str(a.hardware.get("id")), str(b.hardware.get("id"))),
    ]
    ids = list(dict.fromkeys([r.id for r in a.results] + [r.id for r in b.results]))
    for variant in ids:
        ra, rb = a.result(variant), b.result(variant)
        for label, attribute in _COMPARED:
            rows.append((f"{variant} {label}", _cell(ra, attribute), _cell(rb, attribute)))
    return rows


def compare(a: QualityCard, b: QualityCard) -> str:
    return card_files.side_by_side(compare_rows(a, b))
