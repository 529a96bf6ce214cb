"""The chat's composer, driven by keys: Enter sends, Shift+Enter breaks the line, the box grows a few lines and
then scrolls."""

from __future__ import annotations

from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.gui.chat.prompt_edit import MAX_LINES, PromptEdit


def test_enter_sends_and_shift_enter_breaks_the_line(qtbot: QtBot) -> None:
    edit = PromptEdit()
    qtbot.addWidget(edit)
    sent: list[str] = []
    edit.sig_submitted.connect(lambda: sent.append(edit.text()))
    qtbot.keyClicks(edit, "first line")
    qtbot.keyClick(edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(edit, "second")
    assert edit.text() == "first line\nsecond" and sent == []
    qtbot.keyClick(edit, Qt.Key.Key_Return)
    qtbot.keyClick(edit, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)
    assert sent == ["first line\nsecond", "first line\nsecond"]  # Enter itself adds nothing to the text


def test_it_grows_a_few_lines_then_scrolls(qtbot: QtBot) -> None:
    edit = PromptEdit()
    qtbot.addWidget(edit)
    edit.resize(400, edit.height())
    edit.show()
    one_line = edit.height()
    edit.setText("a\nb\nc")
    three_lines = edit.height()
    assert three_lines > one_line
    edit.setText("\n".join(str(n) for n in range(MAX_LINES)))
    most = edit.height()
    edit.setText("\n".join(str(n) for n in range(4 * MAX_LINES)))
    assert edit.height() == most > three_lines
    assert edit.verticalScrollBar().maximum() > 0  # the rest scrolls
    edit.setText("x" * 2000)  # one long line wraps instead of scrolling sideways
    assert edit.horizontalScrollBar().maximum() == 0 and edit.height() == most
