"""The live log of the selected engine, with a level filter that hides llama.cpp's debug lines by default."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from PySide6.QtCore import QTimer, Slot
from PySide6.QtGui import QFontDatabase, QTextCursor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from app.gui.run.log_levels import RANK, line_level

MAX_LINES = 5000
FLUSH_INTERVAL_MS = 100
FILTERS = (
    ("Info, warnings and errors", "info"),
    ("Warnings and errors", "warning"),
    ("Errors only", "error"),
    ("Everything (with debug lines)", "debug"),
)


class LogPanel(QWidget):
    """A read-only, bounded view of one engine's output, appended in batches.

    An engine writes thousands of lines while it loads; appending them one by one would keep the GUI thread
    busy laying out text, so lines wait in a list and are appended together a few times a second.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._pending: list[str] = []
        self._lines: deque[tuple[str, str]] = deque(maxlen=MAX_LINES)  # (level, line), shown or not
        self._counts = dict.fromkeys(RANK, 0)  # lines kept, by level: the hidden count without a scan per line
        self._last_level = "info"
        self.minimum_level = "info"
        self.title_label = QLabel("Engine log")
        self.level_combo = QComboBox()
        for text, level in FILTERS:
            self.level_combo.addItem(text, level)
        self.level_combo.setAccessibleName("Lowest level of the log lines shown")
        self.hidden_label = QLabel()
        self.hidden_label.setAccessibleName("Log lines hidden by the filter")
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
        header = QHBoxLayout()
        header.addWidget(self.title_label, 1)
        header.addWidget(self.hidden_label)
        header.addWidget(self.level_combo)
        layout.addLayout(header)
        layout.addWidget(self.text_edit)
        self.level_combo.currentIndexChanged.connect(self._on_level_combo_changed)

    def show_lines(self, title: str, lines: Iterable[str]) -> None:
        """Replace the view with these lines (another engine was selected)."""
        self._flush_timer.stop()
        self._pending.clear()
        self._lines.clear()
        self._counts = dict.fromkeys(RANK, 0)
        self._last_level = "info"
        self.title_label.setText(title)
        for line in lines:
            self._keep(line)
        self._render()

    def append_line(self, line: str) -> None:
        if self._shown(self._keep(line)):
            self._pending.append(line)
        if not self._flush_timer.isActive():
            self._flush_timer.start()  # also for a hidden line: the count of hidden lines changes

    def set_minimum_level(self, level: str) -> None:
        """Show lines of `level` and above ("debug", "info", "warning", "error")."""
        index = self.level_combo.findData(level)
        if index < 0:
            raise ValueError(f"unknown log level {level!r}; expected one of {', '.join(RANK)}")
        self.level_combo.setCurrentIndex(index)

    def _keep(self, line: str) -> str:
        level = self._last_level = line_level(line, self._last_level)
        if len(self._lines) == self._lines.maxlen:
            self._counts[self._lines[0][0]] -= 1
        self._lines.append((level, line))
        self._counts[level] += 1
        return level

    def _shown(self, level: str) -> bool:
        return RANK[level] >= RANK[self.minimum_level]

    def _render(self) -> None:
        self._flush_timer.stop()
        self._pending.clear()
        self.text_edit.setPlainText("\n".join(line for level, line in self._lines if self._shown(level)))
        self.text_edit.moveCursor(QTextCursor.MoveOperation.End)
        self._show_hidden_count()

    def hidden_count(self) -> int:
        return sum(count for level, count in self._counts.items() if not self._shown(level))

    def _show_hidden_count(self) -> None:
        hidden = self.hidden_count() if self.minimum_level != "debug" else 0
        self.hidden_label.setText(f"{hidden} lines hidden" if hidden else "")

    @Slot(int)
    def _on_level_combo_changed(self, index: int) -> None:
        self.minimum_level = str(self.level_combo.itemData(index))
        self._render()

    def plain_text(self) -> str:
        """What the view shows, pending lines included."""
        shown = self.text_edit.toPlainText()
        return "\n".join([shown, *self._pending]) if self._pending else shown

    @Slot()
    def _on_flush_timer_timeout(self) -> None:
        if self._pending:
            self.text_edit.appendPlainText("\n".join(self._pending))
            self._pending.clear()
        self._show_hidden_count()
