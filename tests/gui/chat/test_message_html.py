"""Code in a chat bubble: highlighted in Pygments' colours for its fence's language, light or dark as the theme is,
and drawn again when the theme changes."""

from __future__ import annotations

import re

from PySide6.QtGui import QColor, QPalette
from pytestqt.qtbot import QtBot

from app.gui.chat.chat_store import ChatMessage
from app.gui.chat.chat_transcript import ChatBubble
from app.gui.chat.message_html import BACKGROUNDS, message_html

TEXT = "Run **this**:\n\n```python\ndef f():\n    return 1\n```\n\n```nosuchlanguage\n<b>x</b>\n```"
KEYWORD = re.compile(r'<span style="([^"]*)">def</span>')


def test_code_is_highlighted_in_the_themes_colours(qtbot: QtBot) -> None:
    light, dark = message_html(TEXT, dark=False), message_html(TEXT, dark=True)
    light_def, dark_def = KEYWORD.search(light), KEYWORD.search(dark)
    assert light_def is not None and dark_def is not None and light_def.group(1) != dark_def.group(1)
    assert BACKGROUNDS[False] in light and BACKGROUNDS[True] in dark
    assert "&lt;b&gt;x&lt;/b&gt;" in light  # markup in code is text; an unknown language is plain
    assert re.search(r"font-weight:\s*700;?\">this</span>", light)  # the prose is still Markdown
    assert KEYWORD.search(message_html("```py\ndef half", dark=False))  # an unclosed block, as it streams


def test_a_bubble_draws_its_code_again_when_the_theme_changes(qtbot: QtBot) -> None:
    bubble = ChatBubble(1, ChatMessage("assistant", TEXT, model="m"), last_answer=True)
    qtbot.addWidget(bubble)
    assert BACKGROUNDS[False] in bubble.body_label.text()
    palette = bubble.palette()
    palette.setColor(QPalette.ColorRole.Base, QColor("#1e1e1e"))
    bubble.setPalette(palette)
    assert BACKGROUNDS[True] in bubble.body_label.text() and "Run " in bubble.body_label.text()
