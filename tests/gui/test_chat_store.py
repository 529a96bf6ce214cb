"""The chat's SQLite store on a real file: conversations kept across opening it again, search, rename, delete, the
file private to the user, and parameters a newer or damaged row holds read back as defaults, never as an error;
and the copy buttons of a bubble's code blocks."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.gui.chat_store import AnswerStats, ChatMessage, ChatParams, ChatStore, title_from
from app.gui.chat_transcript import ChatBubble, code_blocks


def test_conversations_survive_reopening_and_are_searchable(tmp_path: Path) -> None:
    path = tmp_path / "data" / "chats.sqlite"
    store = ChatStore(path)
    params = ChatParams(temperature=1.2, top_p=0.5, max_tokens=24, seed=7, stop=("END",), system_prompt="Be brief.")
    first = store.create("model-a", params, title_from("What is a lighthouse?"))
    second = store.create("model-b", ChatParams())
    answer = ChatMessage("assistant", "A tower with a **light**.", AnswerStats(120.0, 40.5, 9), "model-a")
    store.set_messages(first.id, (ChatMessage("user", "What is a lighthouse?"), answer))
    store.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    store = ChatStore(path)
    loaded = store.load(first.id)
    assert loaded is not None
    assert loaded.params == params and loaded.model == "model-a" and loaded.title == "What is a lighthouse?"
    assert loaded.messages == (ChatMessage("user", "What is a lighthouse?"), answer)
    assert [c.id for c in store.conversations()] == [first.id, second.id]  # the one answered last comes first
    assert [c.id for c in store.conversations("TOWER")] == [first.id]  # message text, any case
    assert [c.id for c in store.conversations("new chat")] == [second.id]  # titles
    assert store.conversations("100%") == []  # LIKE's wildcards are plain characters here

    assert store.rename(second.id, "  Two\nlines  ") == "Two lines"
    assert store.rename(second.id, "   ") == "New chat"
    store.delete(first.id)
    assert store.load(first.id) is None
    assert [c.title for c in store.conversations()] == ["New chat"]
    assert sqlite3.connect(path).execute("SELECT count(*) FROM messages").fetchone() == (0,)
    store.close()


def test_params_from_a_bad_row_fall_back_to_defaults() -> None:
    assert ChatParams.from_json("not json") == ChatParams()
    assert ChatParams.from_json('["a list"]') == ChatParams()
    mixed = ChatParams.from_json('{"temperature": "hot", "max_tokens": 0, "seed": 3, "stop": [1], "future": 1}')
    assert mixed == ChatParams(seed=3)
    assert ChatParams(seed=None, stop=()).request_options() == {"max_tokens": 512, "temperature": 0.7, "top_p": 0.95}
    assert ChatParams(temperature=None, seed=0, stop=("a", "b")).request_options() == {
        "max_tokens": 512, "top_p": 0.95, "seed": 0, "stop": ["a", "b"]
    }  # fmt: skip


def test_code_blocks_get_copy_buttons(qtbot: QtBot) -> None:
    """A bubble offers one copy button per fenced code block, an unclosed one (still streaming) included."""
    text = "Try this:\n\n```python\nprint('hi')\n```\n\nand\n\n```\nls -l\n```\n"
    assert code_blocks(text) == ["print('hi')", "ls -l"]
    assert code_blocks("```sh\necho half") == ["echo half"]
    bubble = ChatBubble(1, ChatMessage("assistant", text, model="m"), last_answer=True)
    qtbot.addWidget(bubble)
    assert [b.text() for b in bubble.code_buttons] == ["Copy code 1", "Copy code 2"]
    qtbot.mouseClick(bubble.code_buttons[1], Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "ls -l"
    assert bubble.regenerate_button is not None and bubble.edit_button is None
    assert "Try this" in bubble.body_label.text()
