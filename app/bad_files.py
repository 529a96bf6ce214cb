"""A file of ours that cannot be read is set aside, never written over: what it held stays for the user to mend."""

from __future__ import annotations

import os
from pathlib import Path


def set_aside(path: Path) -> Path:
    """Move `path` to the first free name beside it, `NAME.bad`, `NAME.bad-2`, ... (an earlier bad copy is kept),
    and return that path."""
    number = 1
    while True:
        bad = path.with_name(f"{path.name}.bad" if number == 1 else f"{path.name}.bad-{number}")
        if not bad.exists():
            os.replace(path, bad)
            return bad
        number += 1
