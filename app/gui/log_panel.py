"""The live log of the selected engine."""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QTimer, Slot
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout, QWidget

MAX_LINES = 5000
FLUSH_INTERVAL_MS = 100


class LogPanel(QWidget):
    """A read-only, bounded view of one engine's output, appended in batches.

    An engine writes thousands of lines while it loads; appending them one by one would keep the GUI thread
    busy laying out text, so lines wait in a list and are appended together a few times a second.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pending: list[str] = []
        self.title_label = QLabel("Engine log")
        self.text_edit = QPlainTextEdit()
        self.text_edit.setReadOnly(True)
        self.text_edit.setAccessibleName("Engine log")
        self.text_edit.setMaximumBlockCount(MAX_LINES)
        self.text_edit.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text_edit.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self._on_flush_timer_timeout)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title_label)
        layout.addWidget(self.text_edit)

    def show_lines(self, title: str, lines: Iterable[str]) -> None:
        """Replace the view with these lines (another engine was selected)."""
        self._flush_timer.stop()
        self._pending.clear()
        self.title_label.setText(title)
        self.text_edit.setPlainText("\n".join(lines))
        self.text_edit.moveCursor(QTextCursor.MoveOperation.End)

    def append_line(self, line: str) -> None:
        self._pending.append(line)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def plain_text(self) -> str:
        """What the view shows, pending lines included."""
        shown = self.text_edit.toPlainText()
        return "\n".join([shown, *self._pending]) if self._pending else shown

    @Slot()
    def _on_flush_timer_timeout(self) -> None:
        if self._pending:
            self.text_edit.appendPlainText("\n".join(self._pending))
            self._pending.clear()
