"""The text a quality run scores: the user's own (their domain) or, without one, a default that ships with Python
itself: the English prose of the language reference's help topics (`pydoc_data.topics`), the same on every
machine with this Python version."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

CHARS_PER_TOKEN = 8  # generous: English prose is about 4 characters a token, code fewer
MAX_USER_BYTES = 256 * 2**20


@dataclass(frozen=True)
class TextSource:
    """What a run scored, as the card records it."""

    kind: str  # "user" or "default"
    description: str
    path: Path
    chars: int
    sha256: str

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "description": self.description, "path": str(self.path), "chars": self.chars,
                "sha256": self.sha256}  # fmt: skip


class TextError(Exception):
    """The text cannot be used; the message says why."""


def user_text(path: Path) -> TextSource:
    """The user's own text file, which must be UTF-8 and not empty."""
    try:
        size = path.stat().st_size
        if size > MAX_USER_BYTES:
            raise TextError(f"{path} is {size / 2**20:.0f} MiB; a quality run reads at most "
                            f"{MAX_USER_BYTES // 2**20} MiB of text")  # fmt: skip
        raw = path.read_bytes()
    except OSError as exc:
        raise TextError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TextError(f"{path} is not UTF-8 text (byte {exc.start} cannot be read)") from None
    if not text.strip():
        raise TextError(f"{path} holds no text")
    return TextSource("user", f"the user's text {path.name}", path.resolve(), len(text),
                      hashlib.sha256(raw).hexdigest())  # fmt: skip


def default_text(directory: Path, tokens: int) -> TextSource:
    """Enough of Python's help topics for `tokens` tokens, written to `directory`."""
    from pydoc_data.topics import topics

    wanted = tokens * CHARS_PER_TOKEN
    parts: list[str] = []
    size = 0
    for name in sorted(topics):
        parts.append(topics[name])
        size += len(topics[name])
        if size >= wanted:
            break
    text = "\n\n".join(parts)[:wanted]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "default-text.txt"
    path.write_text(text, encoding="utf-8")
    version = ".".join(map(str, sys.version_info[:2]))
    return TextSource("default", f"Python {version}'s help topics (pydoc_data.topics, shipped with Python)", path,
                      len(text), hashlib.sha256(text.encode()).hexdigest())  # fmt: skip
