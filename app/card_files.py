"""Saved result cards (benchmark and quality): each one `<id>.json` beside `<id>.md` in a directory of its kind.

What the kinds share is how the files are named, written, found, listed and read back; what a card holds and how it
reads as Markdown stays with its kind (app.bench.card, app.quality.card).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

CARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_LISTED = 500

CardT = TypeVar("CardT")


def id_part(model_id: str) -> str:
    """A model id as it may stand in a card id (and so in a file name)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)[:60]


def write_card(directory: Path, card_id: str, data: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """Write `<id>.json` and `<id>.md`; return both paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / f"{card_id}.json", directory / f"{card_id}.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown, encoding="utf-8")
    return json_path, md_path


def card_file(reference: str, directory: Path, check_id: bool = False) -> Path:
    """A card's JSON from a path to it, or from its id (or file name) among the saved cards in `directory`.

    With `check_id`, a reference that is no file must be a card id (ValueError otherwise), so that it cannot
    name a file outside `directory`.
    """
    path = Path(reference)
    if path.is_file():
        return path
    if check_id and not CARD_ID.fullmatch(reference.removesuffix(".json")):
        raise ValueError(f"not a card id: {reference!r}")
    return directory / (reference if reference.endswith(".json") else f"{reference}.json")


def saved_cards(
    directory: Path,
    parse: Callable[[Any], CardT],
    limit: int = MAX_LISTED,
    skipped: Callable[[Path, Exception], None] | None = None,
) -> list[CardT]:
    """The readable saved cards, newest first; an unreadable one is left out (and told to `skipped`)."""
    cards: list[CardT] = []
    if not directory.is_dir():
        return cards
    for path in sorted(directory.glob("*.json"), reverse=True)[:limit]:
        try:
            cards.append(parse(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if skipped is not None:
                skipped(path, exc)
    return cards


def read_saved_card(
    directory: Path,
    card_id: str,
    parse: Callable[[Any], CardT],
    bad: Callable[[str], Exception],
    missing: Callable[[], Exception],
) -> CardT:
    """The saved card `card_id`: `bad(message)` for no card id or an unreadable card, `missing()` for none."""
    if not CARD_ID.fullmatch(card_id):
        raise bad(f"Not a card id: {card_id!r}.")
    try:
        text = (directory / f"{card_id}.json").read_text(encoding="utf-8")
    except FileNotFoundError:
        raise missing() from None
    try:
        return parse(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise bad(f"The card {card_id!r} cannot be read: {exc}") from None


def side_by_side(rows: list[tuple[str, str, str]]) -> str:
    """(what, A, B) rows as aligned text."""
    width = max(len(row[0]) for row in rows)
    column = max(len(row[1]) for row in rows)
    return "\n".join(f"{name:<{width}}  {left:>{column}}  {right}" for name, left, right in rows) + "\n"


__all__ = ["CARD_ID", "MAX_LISTED", "card_file", "id_part", "read_saved_card", "saved_cards", "side_by_side",
           "write_card"]  # fmt: skip
