"""Engine output: a ring buffer for the UI and a rotating file per engine, with secrets redacted."""

from __future__ import annotations

import logging
import logging.handlers
from collections import deque
from pathlib import Path


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
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lines: deque[str] = deque(maxlen=capacity)
        self._secrets = tuple(secret for secret in secrets if secret)
        self._handler = logging.handlers.RotatingFileHandler(
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
