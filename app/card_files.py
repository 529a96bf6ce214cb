"""Saved result cards (benchmark and quality): each one `<id>.json` beside `<id>.md` in a directory of its kind.

What the kinds share is how the files are named, written, found, listed and read back; what a card holds and how it
reads as Markdown stays with its kind (app.bench.card, app.quality.card).
"""

from __future__ import annotations

import json
import logging
import os
import re
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from app.json_fields import checked_fields
from engines.atomic_files import write_beside

CARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_LISTED = 500

CardT = TypeVar("CardT")
# What reading a card may raise: a file that is no text, no JSON (or JSON nested past the recursion limit), or no card.
UNREADABLE = (OSError, ValueError, KeyError, TypeError, RecursionError)

log = logging.getLogger("modeldeck.cards")


class CardSaveError(Exception):
    """A card could not be written; the message says which and why."""


def id_part(model_id: str) -> str:
    """A model id as it may stand in a card id (and so in a file name)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)[:60]


def write_card(directory: Path, card_id: str, data: dict[str, Any], markdown: str) -> tuple[Path, Path]:
    """Write `<id>.json` and `<id>.md`, each whole or not at all (CardSaveError says why); return both paths.

    Both are written to temporary files first: a full disk leaves neither, never a part of one."""
    json_path, md_path = directory / f"{card_id}.json", directory / f"{card_id}.md"
    texts = {md_path: markdown, json_path: json.dumps(data, indent=2) + "\n"}  # the JSON, which lists it, last
    written: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            written[path] = write_beside(path, text)
        for path, tmp in written.items():
            os.replace(tmp, path)
    except OSError as exc:
        for tmp in written.values():
            tmp.unlink(missing_ok=True)
        raise CardSaveError(f"could not save the card {card_id} in {directory}: {exc.strerror or exc}") from exc
    return json_path, md_path


def read_card(cls: type[CardT], data: Any, kind: str, schemas: tuple[int, ...], item: str) -> CardT:
    """The card of the dataclass `cls` saved as `data`, each of its `results` a dataclass named `item` and its
    number in messages; ValueError, saying why, for a card of a schema not in `schemas` or not of this shape."""
    if not isinstance(data, dict):
        raise ValueError(f"the card is {type(data).__name__}, not an object")
    version = data.get("schema_version")
    if version not in schemas:
        readable = ", ".join(str(schema) for schema in schemas)
        raise ValueError(f"{kind} card schema {version!r} is not one of those this ModelDeck reads: {readable}")
    fields = checked_fields(cls, data, "the card")
    result_type = typing.get_args(typing.get_type_hints(cls)["results"])[0]
    results = [result_type(**checked_fields(result_type, result, f"{item} {n}"))
               for n, result in enumerate(fields["results"], 1)]  # fmt: skip
    return cls(**{**fields, "results": results})


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
) -> list[CardT]:
    """The readable saved cards, newest first; an unreadable one is left out, with a warning naming it."""
    cards: list[CardT] = []
    if not directory.is_dir():
        return cards
    for path in sorted(directory.glob("*.json"), reverse=True)[:limit]:
        try:
            cards.append(parse(json.loads(path.read_text(encoding="utf-8"))))
        except UNREADABLE as exc:
            log.warning("skipping the unreadable card %s: %s", path, _reason(exc))
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
        return parse(json.loads((directory / f"{card_id}.json").read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise missing() from None
    except UNREADABLE as exc:
        raise bad(f"The card {card_id!r} cannot be read: {_reason(exc)}") from None


def load_named(references: Sequence[str], load: Callable[[str], CardT]) -> list[CardT]:
    """The cards named on a command line (paths or ids), each read by `load`; ValueError naming the first that
    cannot be read, and why."""
    cards = []
    for reference in references:
        try:
            cards.append(load(reference))
        except UNREADABLE as exc:
            raise ValueError(f"cannot read the card {reference}: {_reason(exc)}") from None
    return cards


def _reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"it is not JSON ({exc})"
    if isinstance(exc, RecursionError):
        return "its JSON is nested too deeply"
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def side_by_side(rows: list[tuple[str, str, str]]) -> str:
    """(what, A, B) rows as aligned text."""
    width = max(len(row[0]) for row in rows)
    column = max(len(row[1]) for row in rows)
    return "\n".join(f"{name:<{width}}  {left:>{column}}  {right}" for name, left, right in rows) + "\n"


__all__ = ["CARD_ID", "MAX_LISTED", "UNREADABLE", "CardSaveError", "card_file", "id_part", "load_named",
           "read_card", "read_saved_card", "saved_cards", "side_by_side", "write_card"]  # fmt: skip
