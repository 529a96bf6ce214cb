"""Checks an engine command line against a command-line schema extracted from the engine's own source
(tests/fixtures/engine_cli/*.json): every flag exists, takes a value or not as the engine's parser says, and every
value has the right type, lies within the declared bounds and is one of the declared choices."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).resolve().parent.parent / "fixtures" / "engine_cli"
_HUMAN_INT = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]?$")


@cache
def load_schema(name: str) -> dict[str, Any]:
    return dict(json.loads((SCHEMAS / name).read_text(encoding="utf-8")))


def _lookup(schema: dict[str, Any], flag: str) -> dict[str, Any] | None:
    if schema["engine"] == "vllm" and flag.startswith("--"):  # its FlexibleArgumentParser takes `_` for `-`
        flag = "--" + flag[2:].replace("_", "-")
    options: dict[str, dict[str, Any]] = schema["options"]
    if flag in options:
        return options[flag]
    return next((o for o in options.values() if flag in o.get("aliases", [])), None)


def _value_problem(flag: str, option: dict[str, Any], value: str) -> str | None:
    kind = option.get("type")
    try:
        if kind == "int":
            number: float = int(value)
        elif kind == "human_int":
            if not (_HUMAN_INT.match(value) or (value in ("-1", "auto") and option["dest"] == "max_model_len")):
                return f"{flag} {value!r}: not an integer (such as 8192 or 8k)"
            number = float(re.sub(r"[kKmMgGtT]$", "", value))
        elif kind == "float":
            number = float(value)
        elif kind == "json":
            json.loads(value)
            number = 0
        else:
            number = 0
    except ValueError:
        return f"{flag} {value!r}: not a valid {kind}"
    bounds = option.get("bounds", {})
    holds = {
        "ge": lambda limit: number >= limit,
        "gt": lambda limit: number > limit,
        "le": lambda limit: number <= limit,
        "lt": lambda limit: number < limit,
    }
    for name in bounds:
        if not holds[name](bounds[name]):
            return f"{flag} {value!r}: must be {name} {bounds[name]}"
    # A metavar list (the Literal of a field that also takes any str) is what vLLM knows; anything else would
    # only fail later, at load time, so it is held to the list too.
    choices = option.get("choices") or option.get("metavar_choices")
    if choices is not None and value not in [str(c) for c in choices if c is not None]:
        return f"{flag} {value!r}: not one of {choices}"
    return None


def check_command(schema: dict[str, Any], args: list[str]) -> list[str]:
    """Problems with `args` (what follows the command, e.g. after `vllm serve`); empty when all is well."""
    problems: list[str] = []
    positionals = list(schema.get("positionals", []))
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if not positionals:
                problems.append(f"unexpected argument {arg!r}")
            else:
                positionals.pop(0)
            i += 1
            continue
        flag, has_inline, inline = arg.partition("=")
        option = _lookup(schema, flag)
        if option is None:
            problems.append(f"unknown flag {flag}")
            i += 1
            continue
        if option["kind"] in ("flag", "boolean_optional"):
            if has_inline:
                problems.append(f"{flag} takes no value")
            i += 1
            continue
        if has_inline:
            values = [inline]
            i += 1
        else:
            nargs = option.get("nargs")
            taken = []
            i += 1
            while i < len(args) and (not args[i].startswith("--")) and (nargs == "+" or not taken):
                taken.append(args[i])
                i += 1
            values = taken
            if not values and option["kind"] != "optional_value":
                problems.append(f"{flag} needs a value")
        problems += [p for value in values if (p := _value_problem(flag, option, value))]
    return problems
