"""The chat's composer: several lines, Enter sends and Shift+Enter breaks the line; it grows with what is typed
up to a few lines, then scrolls."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QFrame, QPlainTextEdit, QSizePolicy, QWidget

MAX_LINES = 6  # shown at once before it scrolls


class PromptEdit(QPlainTextEdit):
    sig_submitted = Signal()  # Enter (or the keypad's) without Shift

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTabChangesFocus(True)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._fit_height()

    def text(self) -> str:
        return self.toPlainText()

    def setText(self, text: str) -> None:
        self.setPlainText(text)
        self.moveCursor(self.textCursor().MoveOperation.End)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            event.accept()
            self.sig_submitted.emit()
            return
        if enter:  # Shift+Enter: a plain line break, not the paragraph separator Qt would insert
            self.insertPlainText("\n")
            event.accept()
            return
        super().keyPressEvent(event)

    def _fit_height(self) -> None:
        lines = max(1, min(MAX_LINES, int(self.document().size().height())))
        line_height = self.fontMetrics().lineSpacing()
        margins = self.contentsMargins().top() + self.contentsMargins().bottom()
        frame = 2 * self.frameWidth() if self.frameShape() != QFrame.Shape.NoFrame else 0
        self.setFixedHeight(lines * line_height + int(2 * self.document().documentMargin()) + margins + frame)
