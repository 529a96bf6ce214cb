"""The chat transcript: each message a bubble of Markdown (yours on the right, the model's on the left), its code
highlighted (app.gui.chat.message_html), with copy buttons for the answer and each of its code blocks, the answer's
speed, Regenerate on the last answer (with its versions to step through: "2 / 3") and Edit on your messages. Only
the bubble being streamed is redrawn while an answer arrives."""

from __future__ import annotations

import functools

from PySide6.QtCore import QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QScrollArea, QVBoxLayout, QWidget

from app.gui.chat.chat_store import ChatMessage
from app.gui.chat.message_html import FENCE, message_html

BUBBLE_STYLE = """
QFrame#user_bubble { background-color: palette(alternate-base); border: 1px solid palette(mid); border-radius: 10px; }
QFrame#assistant_bubble { background-color: palette(base); border: 1px solid palette(mid); border-radius: 10px; }
"""


def code_blocks(markdown: str) -> list[str]:
    """The contents of the fenced code blocks of a Markdown text, an unclosed last one included."""
    return [fence.group(2).rstrip("\n") for fence in FENCE.finditer(markdown)]


class ChatBubble(QFrame):
    """One message. `index` is its place in the conversation."""

    sig_edit_requested = Signal(int)
    sig_regenerate_requested = Signal()
    sig_version_requested = Signal(int)  # the index of the answer's version to show

    def __init__(self, index: int, message: ChatMessage, last_answer: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.index = index
        self.message = message
        self.last_answer = last_answer
        user = message.role == "user"
        self.setObjectName("user_bubble" if user else "assistant_bubble")
        self.header_label = QLabel("You" if user else (message.model or "Assistant"))
        font = self.header_label.font()
        font.setBold(True)
        self.header_label.setFont(font)
        self.body_label = QLabel()
        self.body_label.setTextFormat(Qt.TextFormat.RichText)
        self.body_label.setWordWrap(True)
        self.body_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        self.body_label.setOpenExternalLinks(False)  # a model's links are shown, never opened by a stray click
        self.stats_label = QLabel()
        self.stats_label.setAccessibleName("Speed of this answer")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setAccessibleName("Copy this message")
        self._footer = QHBoxLayout()
        self._code_buttons: list[QPushButton] = []
        self.regenerate_button: QPushButton | None = None
        self.edit_button: QPushButton | None = None
        self.version_label: QLabel | None = None  # "2 / 3", on an answer with versions
        self._streaming = False
        layout = QVBoxLayout(self)
        layout.addWidget(self.header_label)
        layout.addWidget(self.body_label)
        layout.addLayout(self._footer)
        self._footer.addWidget(self.stats_label)
        self._footer.addStretch(1)
        self._footer.addWidget(self.copy_button)
        if user:
            self.edit_button = QPushButton("Edit")
            self.edit_button.setAccessibleName("Edit this message and send it again")
            self.edit_button.clicked.connect(self._on_edit_button_clicked)
            self._footer.addWidget(self.edit_button)
        elif last_answer:
            if message.others:
                self._add_version_buttons(message)
            self.regenerate_button = QPushButton("Regenerate")
            self.regenerate_button.setAccessibleName("Regenerate this answer")
            self.regenerate_button.clicked.connect(self.sig_regenerate_requested)
            self._footer.addWidget(self.regenerate_button)
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        self.show_message(message)

    def show_message(self, message: ChatMessage, streaming: bool = False) -> None:
        self.message, self._streaming = message, streaming
        text = message.content or ("\N{HORIZONTAL ELLIPSIS}" if streaming else "")
        self.body_label.setText(message_html(text, self.palette().color(QPalette.ColorRole.Base).lightness() < 128))
        self.body_label.setAccessibleName("Your message" if message.role == "user" else "The model's answer")
        stats = message.stats.text() if message.stats else ""
        self.stats_label.setText(f"{stats} (stopped)" if message.stopped else stats)
        self.stats_label.setVisible(bool(self.stats_label.text()))
        for button in (self.copy_button, self.regenerate_button, self.edit_button):
            if button is not None:
                button.setEnabled(not streaming)
        if not streaming:
            self._show_code_buttons(code_blocks(message.content))

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:  # the theme changed: code in its colours
            self.show_message(self.message, self._streaming)

    def _show_code_buttons(self, blocks: list[str]) -> None:
        for button in self._code_buttons:
            button.deleteLater()
        self._code_buttons = []
        for number, block in enumerate(blocks, 1):
            button = QPushButton(f"Copy code {number}" if len(blocks) > 1 else "Copy code")
            button.setAccessibleName(f"Copy code block {number}")
            button.setToolTip(block[:200])
            button.clicked.connect(functools.partial(_copy, block))
            self._footer.insertWidget(self._footer.count() - 1, button)
            self._code_buttons.append(button)

    def _add_version_buttons(self, message: ChatMessage) -> None:
        count = len(message.others) + 1
        self.version_label = QLabel(f"{message.version + 1} / {count}")
        self.version_label.setAccessibleName(f"Version {message.version + 1} of {count} of this answer")
        for text, name, step in (("\N{BLACK LEFT-POINTING SMALL TRIANGLE}", "Earlier version", -1),
                                 ("\N{BLACK RIGHT-POINTING SMALL TRIANGLE}", "Later version", 1)):  # fmt: skip
            button = QPushButton(text)
            button.setObjectName("earlier_version" if step < 0 else "later_version")
            button.setAccessibleName(name)
            button.setToolTip(f"{name} of this answer")
            button.setEnabled(0 <= message.version + step < count)
            button.clicked.connect(functools.partial(self.sig_version_requested.emit, message.version + step))
            self._footer.addWidget(button)
            if step < 0:
                self._footer.addWidget(self.version_label)

    @property
    def code_buttons(self) -> list[QPushButton]:
        return list(self._code_buttons)

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        _copy(self.message.content)

    @Slot()
    def _on_edit_button_clicked(self) -> None:
        self.sig_edit_requested.emit(self.index)


def _copy(text: str) -> None:
    QGuiApplication.clipboard().setText(text)


class ChatTranscript(QScrollArea):
    """The bubbles of one conversation, scrolled to the newest."""

    sig_edit_requested = Signal(int)  # the index of the user message to edit
    sig_regenerate_requested = Signal()
    sig_version_requested = Signal(int)  # the last answer's version to show

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setAccessibleName("Chat transcript")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self._content = QWidget()
        self._content.setStyleSheet(BUBBLE_STYLE)
        self._layout = QVBoxLayout(self._content)
        self._layout.addStretch(1)
        self.setWidget(self._content)
        self.bubbles: list[ChatBubble] = []
        self._rows: list[QWidget] = []  # a bubble and the stretch that puts it on its side
        self._streaming: ChatBubble | None = None
        self.verticalScrollBar().rangeChanged.connect(self._on_scroll_range_changed)

    def show_messages(self, messages: tuple[ChatMessage, ...]) -> None:
        """Draw a conversation (opened, answered, or changed by an edit or a regeneration). Bubbles that show the
        same message in the same place stay: a finished answer does not redraw the whole conversation."""
        last_answer = len(messages) - 1 if messages and messages[-1].role == "assistant" else -1
        wanted = [(message, index == last_answer) for index, message in enumerate(messages)]
        keep = 0
        for bubble, (message, last) in zip(self.bubbles, wanted, strict=False):
            if bubble is self._streaming or bubble.message != message or bubble.last_answer != last:
                break
            keep += 1
        for row in self._rows[keep:]:
            row.hide()
            self._layout.removeWidget(row)
            row.deleteLater()
        self.bubbles, self._rows, self._streaming = self.bubbles[:keep], self._rows[:keep], None
        for index in range(keep, len(messages)):
            self._add(ChatBubble(index, *wanted[index]))

    def begin_answer(self, message: ChatMessage) -> None:
        """A bubble for the answer that is about to stream."""
        self._streaming = ChatBubble(len(self.bubbles), message, last_answer=False)
        self._streaming.show_message(message, streaming=True)
        self._add(self._streaming)

    def update_answer(self, message: ChatMessage) -> None:
        if self._streaming is not None:
            self._streaming.show_message(message, streaming=True)

    def plain_text(self) -> str:
        return "\n\n".join(f"{b.header_label.text()}: {b.message.content}" for b in self.bubbles)

    def _add(self, bubble: ChatBubble) -> None:
        row = QWidget()
        row_layout = QHBoxLayout(row)
        row_layout.setContentsMargins(0, 0, 0, 0)
        if bubble.message.role == "user":
            row_layout.addStretch(1)
            row_layout.addWidget(bubble, 5)
        else:
            row_layout.addWidget(bubble, 5)
            row_layout.addStretch(1)
        bubble.sig_edit_requested.connect(self.sig_edit_requested)
        bubble.sig_regenerate_requested.connect(self.sig_regenerate_requested)
        bubble.sig_version_requested.connect(self.sig_version_requested)
        self._layout.insertWidget(self._layout.count() - 1, row)
        self.bubbles.append(bubble)
        self._rows.append(row)

    @Slot(int, int)
    def _on_scroll_range_changed(self, _low: int, _high: int) -> None:
        # Follow the newest text, once the layout has made room for it.
        QTimer.singleShot(0, self._scroll_to_end)

    @Slot()
    def _scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
