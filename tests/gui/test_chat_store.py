"""The chat's SQLite store on a real file: conversations kept across opening it again, search, rename, delete, the
file private to the user, and parameters a newer or damaged row holds read back as defaults, never as an error; a
file that is not a database set aside, one in use or from a newer version left untouched, and the window still
opening; and the copy buttons of a bubble's code blocks."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from pytestqt.qtbot import QtBot

from app.client import default_port
from app.gui.chat_store import FILE_NAME, AnswerStats, ChatMessage, ChatParams, ChatStore, title_from
from app.gui.chat_transcript import ChatBubble, code_blocks
from app.gui.main_window import MainWindow
from app.gui.service_connection import ServiceConnection
from app.paths import AppPaths

NOT_A_DATABASE = bytes(range(256)) * 32


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


def saved_chat(path: Path) -> bytes:
    """A file holding one answered conversation, closed; its bytes."""
    store = ChatStore(path)
    conversation = store.create("model-a", ChatParams(), "Kept")
    store.set_messages(conversation.id, (ChatMessage("user", "Hello"), ChatMessage("assistant", "Hi", model="m")))
    store.close()
    return path.read_bytes()


def still_works(store: ChatStore) -> None:
    conversation = store.create("model-a", ChatParams())
    store.set_messages(conversation.id, (ChatMessage("user", "Again"),))
    assert [c.id for c in store.conversations("again")] == [conversation.id]


def test_a_file_that_is_not_a_database_is_set_aside_with_its_wal(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    path.write_bytes(NOT_A_DATABASE)
    path.with_name(f"{FILE_NAME}-wal").write_bytes(b"its log")
    (tmp_path / f"{FILE_NAME}.bad").write_bytes(b"an earlier bad copy")
    store = ChatStore(path)
    assert store.problem is not None and f"{FILE_NAME}.bad-2" in store.problem
    assert (tmp_path / f"{FILE_NAME}.bad-2").read_bytes() == NOT_A_DATABASE
    assert (tmp_path / f"{FILE_NAME}.bad-2-wal").read_bytes() == b"its log"
    assert (tmp_path / f"{FILE_NAME}.bad").read_bytes() == b"an earlier bad copy"
    still_works(store)
    store.close()
    assert len(ChatStore(path).conversations()) == 1  # the new file keeps what this run saved


def test_a_file_in_use_is_left_alone_and_this_run_is_not_saved(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    before = saved_chat(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = ChatStore(path, lock_wait_s=0.05)
        assert store.problem is not None and "in use by another program" in store.problem
        assert "not be saved" in store.problem
        still_works(store)
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert path.read_bytes() == before
    assert [c.title for c in ChatStore(path).conversations()] == ["Kept"]


def test_a_file_from_a_newer_version_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    saved_chat(path)
    newer = sqlite3.connect(path)
    newer.executescript(
        "ALTER TABLE conversations ADD COLUMN pinned INTEGER; ALTER TABLE messages ADD COLUMN images TEXT;"
        " PRAGMA user_version=2;"
    )
    newer.close()
    before = path.read_bytes()
    store = ChatStore(path)
    assert store.problem is not None and "newer ModelDeck" in store.problem and "not be saved" in store.problem
    still_works(store)
    store.close()
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (2,)


def test_the_window_opens_on_a_bad_chats_file_and_says_so(qtbot: QtBot, paths: AppPaths) -> None:
    paths.data.mkdir(parents=True, exist_ok=True)
    (paths.data / FILE_NAME).write_bytes(NOT_A_DATABASE)
    window = MainWindow(ServiceConnection(paths, default_port()))  # never opened: no service is started
    qtbot.addWidget(window)
    assert f"{FILE_NAME}.bad" in window.statusBar().currentMessage()
    assert (paths.data / f"{FILE_NAME}.bad").read_bytes() == NOT_A_DATABASE


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
