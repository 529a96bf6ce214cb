"""Engine output: a ring buffer for the UI and a rotating file per engine, with secrets redacted."""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import stat
from collections import deque
from pathlib import Path


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A rotating log file only this user can read (0600; engines print paths, prompts in errors, settings), in a
    folder only this user can enter when it is created here."""

    def _open(self) -> io.TextIOWrapper:
        path = Path(self.baseFilename)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600))
        if os.name == "posix" and stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)  # an earlier version's file
        return super()._open()


class EngineLog:
    """Keeps the last `capacity` lines in memory and every line in a rotating file."""

    def __init__(
        self,
        path: Path,
        secrets: tuple[str, ...] = (),
        capacity: int = 2000,
        max_bytes: int = 5 * 1024 * 1024,
        backups: int = 3,
    ) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = path
        self._lines: deque[str] = deque(maxlen=capacity)
        self._secrets = tuple(secret for secret in secrets if secret)
        self._handler = PrivateRotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8", delay=True
        )
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))

    def redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def add_secrets(self, secrets: tuple[str, ...]) -> None:
        self._secrets = tuple(dict.fromkeys(self._secrets + tuple(s for s in secrets if s)))

    def append(self, line: str) -> str:
        """Record one line of output; returns the line as stored (redacted, no trailing newline)."""
        clean = self.redact(line.rstrip("\r\n"))
        self._lines.append(clean)
        record = logging.LogRecord("engine", logging.INFO, str(self.path), 0, "%s", (clean,), None)
        self._handler.emit(record)
        return clean

    def tail(self, count: int | None = None) -> list[str]:
        lines = list(self._lines)
        return lines if count is None else lines[-count:]

    def close(self) -> None:
        self._handler.close()
