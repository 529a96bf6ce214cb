"""Saved result cards (benchmark and quality): each one `<id>.json` beside `<id>.md` in a directory of its kind.

What the kinds share is how the files are named, written, found, listed and read back; what a card holds and how it
reads as Markdown stays with its kind (app.bench.card, app.quality.card).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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
    fields = _checked_fields(cls, data, "the card")
    result_type = typing.get_args(typing.get_type_hints(cls)["results"])[0]
    results = [result_type(**_checked_fields(result_type, result, f"{item} {n}"))
               for n, result in enumerate(fields["results"], 1)]  # fmt: skip
    return cls(**{**fields, "results": results})


def _checked_fields(cls: type, data: Any, what: str) -> dict[str, Any]:
    """`data` as the fields of the dataclass `cls`, each of the type it declares; ValueError naming `what`
    otherwise. A dataclass in it is left for the caller to check on its own. A field `Annotated[dict[str, Any], T]`
    with a TypedDict `T` must have the keys `T` requires, and those of `T` it has of their types; other keys may
    be there too (cards of older and newer versions hold others)."""
    if not isinstance(data, dict):
        raise ValueError(f"{what} is {type(data).__name__}, not an object")
    fields, hints = _fields(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"{what} has an unknown field {unknown[0]!r}")
    for name, required in fields.items():
        if name not in data:
            if required:
                raise ValueError(f"{what} has no {name!r}")
        elif problem := _problem(data[name], hints[name], name):
            raise ValueError(f"{what}: {problem}")
    return data


@functools.cache
def _fields(cls: type) -> tuple[dict[str, bool], dict[str, Any]]:
    """Each field of a dataclass, or key of a TypedDict, and whether it is required; their types."""
    hints = typing.get_type_hints(cls, include_extras=True)
    if dataclasses.is_dataclass(cls):
        fields = {
            f.name: f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            for f in dataclasses.fields(cls)
        }
        return fields, hints
    # Read from the hints: under `from __future__ import annotations`, Python 3.11 counts a NotRequired key among
    # the TypedDict's __required_keys__.
    optional = {key for key, hint in hints.items() if typing.get_origin(hint) is typing.NotRequired}
    total = getattr(cls, "__total__", True)
    fields = {key: total and key not in optional for key in hints}
    return fields, {key: typing.get_args(hint)[0] if key in optional else hint for key, hint in hints.items()}


def _problem(value: Any, hint: Any, name: str) -> str | None:
    """What makes `value`, the field or key `name`, not of the type `hint`, in words; None when it is."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:  # a dict, and the TypedDict listing the keys it must have
        return _problem(value, args[0], name) or _problem(value, args[1], name)
    if typing.is_typeddict(hint):
        return _keys_problem(value, hint, name)
    if origin in (typing.Union, types.UnionType):
        if any(_problem(value, arg, name) is None for arg in args):
            return None
        record = next((arg for arg in args if typing.is_typeddict(arg)), None)
        if record is not None and isinstance(value, dict):  # say what is wrong inside it
            return _keys_problem(value, record, name)
    elif _matches(value, hint):
        return None
    return f"{name!r} is {type(value).__name__}, not {_hint_text(hint)}"


def _keys_problem(value: Any, record: type, name: str) -> str | None:
    if not isinstance(value, dict):
        return f"{name!r} is {type(value).__name__}, not an object"
    keys, hints = _fields(record)
    for key, required in keys.items():
        if key not in value:
            if required:
                return f"{name!r} has no {key!r}"
        elif problem := _problem(value[key], hints[key], f"{name}.{key}"):
            return problem
    return None


def _matches(value: Any, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_problem(item, args[0], "") is None for item in value)
    if origin is dict:
        return isinstance(value, dict) and all(_problem(item, args[1], "") is None for item in value.values())
    if hint is Any or dataclasses.is_dataclass(hint):
        return True
    if hint is type(None):
        return value is None
    if isinstance(value, bool):
        return hint is bool
    return isinstance(value, int | float) if hint is float else isinstance(value, hint)


def _hint_text(hint: Any) -> str:
    return re.sub(r"[\w.]+\.(\w+)", r"\1", str(hint)) if typing.get_origin(hint) else hint.__name__


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


def _reason(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "it is not UTF-8 text"
    if isinstance(exc, RecursionError):
        return "its JSON is nested too deeply"
    return (exc.strerror if isinstance(exc, OSError) else None) or str(exc)


def side_by_side(rows: list[tuple[str, str, str]]) -> str:
    """(what, A, B) rows as aligned text."""
    width = max(len(row[0]) for row in rows)
    column = max(len(row[1]) for row in rows)
    return "\n".join(f"{name:<{width}}  {left:>{column}}  {right}" for name, left, right in rows) + "\n"


__all__ = ["CARD_ID", "MAX_LISTED", "UNREADABLE", "CardSaveError", "card_file", "id_part",
           "read_card", "read_saved_card", "saved_cards", "side_by_side", "write_card"]  # fmt: skip
