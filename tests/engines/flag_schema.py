"""Checks an engine command line against the flags the engine itself declares (tests/fixtures/engine_flags)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parent.parent / "fixtures" / "engine_flags"


def load_schema(engine: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{engine}.json").read_text(encoding="utf-8"))
    return schema


def schema_errors(schema: dict[str, Any], args: list[str]) -> list[str]:
    """What in `args` (the command after the program) the engine's parser would refuse: unknown flags, flags
    missing their value, values outside the declared choices, switches given a value, missing positionals."""
    flags: dict[str, dict[str, Any]] = schema["flags"]
    errors: list[str] = []
    positionals: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            positionals.append(arg)
            i += 1
            continue
        name, has_inline, inline = arg.partition("=")
        spec = flags.get(name)
        if spec is None:
            errors.append(f"unknown flag {name}")
            i += 1
            continue
        if name in seen:
            errors.append(f"{name} given twice")
        seen.add(name)
        if spec["takes_value"] is None:  # a bare flag or a value
            i += 2 if not has_inline and i + 1 < len(args) and not args[i + 1].startswith("-") else 1
            continue
        if not spec["takes_value"]:
            if has_inline:
                errors.append(f"{name} takes no value")
            i += 1
            continue
        if has_inline:
            value: str | None = inline
            i += 1
        else:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
            i += 2 if value is not None else 1
        if value is None:
            errors.append(f"{name} needs a value")
        elif spec["choices"] is not None and value not in [str(choice) for choice in spec["choices"]]:
            errors.append(f"{name} {value!r} is not one of {spec['choices']}")
    if len(positionals) != len(schema["positional"]):
        errors.append(f"expected positionals {schema['positional']}, got {positionals}")
    return errors
