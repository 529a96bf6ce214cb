"""Files written whole: the data goes to a new file beside the target, which then takes its name, so a reader meets
the old file or the new one and a failed write (a full disk) or a crash leaves the old one as it was.

It imports nothing of ModelDeck, so the application's own files (settings, keys, the pulled-model index) use it as
the engine records do."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

PRIVATE = 0o600

# A new file only (two writers never share one; a file or link planted at the name is refused), never through a link
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


def write_atomically(path: Path, data: str | bytes, mode: int = PRIVATE) -> None:
    """Replace `path` by a file holding `data` (text as UTF-8), created with `mode` less the umask; the folders it
    creates for a private file are private too. A link at `path` is replaced, never written through."""
    temporary = write_beside(path, data, mode)
    try:
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def write_beside(path: Path, data: str | bytes, mode: int = PRIVATE) -> Path:
    """A new file in `path`'s folder holding `data`, on disk, for the caller to move onto `path` (os.replace) or to
    remove: for files that change together, each is written before any takes its name. Nothing is left on failure.

    Its name starts with a dot and ends in .tmp (readers that list *.json pass it over), and is not guessable."""
    path.parent.mkdir(mode=0o777 if mode & 0o077 else 0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, _CREATE, mode)
    try:
        with open(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())  # on disk before the name moves: a power cut leaves no empty file
    except BaseException:
        _remove(temporary)
        raise
    return temporary


def _remove(temporary: Path) -> None:
    with contextlib.suppress(OSError):
        temporary.unlink()


__all__ = ["PRIVATE", "write_atomically", "write_beside"]
