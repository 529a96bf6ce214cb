"""JSON objects read back as the dataclasses they were saved from: each field of the type its dataclass declares, or
one ValueError naming the field. It imports nothing of ModelDeck, so every layer may use it."""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from typing import Any


def checked_fields(cls: type, data: Any, what: str) -> dict[str, Any]:
    """`data` as the fields of the dataclass `cls`, each of the type it declares; ValueError naming `what`
    otherwise. A dataclass in it is left for the caller to check on its own. A field `Annotated[dict[str, Any], T]`
    with a TypedDict `T` must have the keys `T` requires, and those of `T` it has of their types; other keys may
    be there too (files of older and newer versions hold others)."""
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
    if origin is tuple:  # a JSON array (or the tuple itself, in a dict from `asdict`): tuple[T, ...] of any length
        if not isinstance(value, list | tuple):
            return False
        kinds = [args[0]] * len(value) if args[1:] == (Ellipsis,) else list(args)
        return len(kinds) == len(value) and all(
            _problem(item, kind, "") is None for item, kind in zip(value, kinds, strict=True)
        )
    if origin is typing.Literal:
        return any(type(value) is type(choice) and value == choice for choice in args)
    if hint is Any or dataclasses.is_dataclass(hint):
        return True
    if hint is type(None):
        return value is None
    if isinstance(value, bool):
        return hint is bool
    return isinstance(value, int | float) if hint is float else isinstance(value, hint)


def _hint_text(hint: Any) -> str:
    return re.sub(r"[\w.]+\.(\w+)", r"\1", str(hint)) if typing.get_origin(hint) else hint.__name__


__all__ = ["checked_fields"]
