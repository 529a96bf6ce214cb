"""The chat's SQLite store on a real file: conversations kept across opening it again, search, rename, delete, the
file private to the user, and parameters a newer or damaged row holds read back as defaults, never as an error; a
file that is not a database set aside, one in use or from a newer version left untouched, and the window still
opening; a file another program locks while the window is open: the chat kept on the page, said so, and saved whole
once the file is free, and quitting then saving it at last or asking before it is lost; and the copy buttons of a
bubble's code blocks."""

from __future__ import annotations

import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox, QSystemTrayIcon, QWidget
from pytestqt.qtbot import QtBot

from app.api_types import EndpointRecord
from app.client import default_port
from app.gui.chat.chat_store import (
    FILE_NAME,
    SCHEMA_VERSION,
    AnswerStats,
    ChatMessage,
    ChatParams,
    ChatStore,
    title_from,
)
from app.gui.chat.chat_transcript import ChatBubble, code_blocks
from app.gui.common import quit_dialogs
from app.gui.connection.service_connection import ServiceConnection
from app.gui.shell.main_window import MainWindow
from app.paths import AppPaths
from tests.gui.conftest import QuitAnswers
from tests.support.service import free_port
from tests.support.synthetic import SYNTHETIC_ENGINE, SYNTHETIC_MODEL
from tests.support.waiting import wait_for

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
        f" PRAGMA user_version={SCHEMA_VERSION + 1};"
    )
    newer.close()
    before = path.read_bytes()
    store = ChatStore(path)
    assert store.problem is not None and "newer ModelDeck" in store.problem and "not be saved" in store.problem
    still_works(store)
    store.close()
    assert path.read_bytes() == before
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION + 1,)


def test_answer_versions_are_kept_and_a_file_of_schema_1_gains_them(tmp_path: Path) -> None:
    """Regenerate keeps the earlier answers: each version with its speed, and which one is shown. A file written
    before versions existed (schema 1) opens with its messages and takes versions from then on."""
    path = tmp_path / FILE_NAME
    old = sqlite3.connect(path)
    old.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, model TEXT, params TEXT NOT NULL,"
        " created REAL NOT NULL, updated REAL NOT NULL);"
        " CREATE TABLE messages (conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,"
        " position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, model TEXT, stats TEXT,"
        " stopped INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (conversation, position));"
        " INSERT INTO conversations VALUES (1, 'Old', 'm', '{}', 1.0, 1.0);"
        " INSERT INTO messages VALUES (1, 0, 'user', 'Hi', NULL, NULL, 0), (1, 1, 'assistant', 'One', 'm', NULL, 0);"
        " PRAGMA user_version=1;"
    )
    old.close()
    store = ChatStore(path)
    assert store.problem is None
    loaded = store.load(1)
    assert loaded is not None and loaded.messages == (
        ChatMessage("user", "Hi"),
        ChatMessage("assistant", "One", model="m"),
    )
    stats = AnswerStats(120.0, 30.5, 7)
    answer = loaded.messages[1].with_version(ChatMessage("assistant", "Two", stats, "m"))
    answer = answer.with_version(ChatMessage("assistant", "Three", None, "m", stopped=True)).shown_as(1)
    assert (answer.content, answer.stats, answer.version) == ("Two", stats, 1)
    assert [v.content for v in answer.versions()] == ["One", "Two", "Three"] and answer.versions()[2].stopped
    store.set_messages(1, (loaded.messages[0], answer))
    store.close()
    again = ChatStore(path)
    reloaded = again.load(1)
    assert reloaded is not None and reloaded.messages[1] == answer
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    again.close()


def test_the_window_opens_on_a_bad_chats_file_and_says_so(qtbot: QtBot, paths: AppPaths) -> None:
    paths.data.mkdir(parents=True, exist_ok=True)
    (paths.data / FILE_NAME).write_bytes(NOT_A_DATABASE)
    window = MainWindow(ServiceConnection(paths, default_port()))  # never opened: no service is started
    qtbot.addWidget(window)
    assert f"{FILE_NAME}.bad" in window.statusBar().currentMessage()
    assert (paths.data / f"{FILE_NAME}.bad").read_bytes() == NOT_A_DATABASE


SAVE_PAUSE_S = 1.0  # the longest a save may hold the GUI thread while another program holds the file
SYNTHETIC_RECORD = {
    "id": SYNTHETIC_MODEL, "name": SYNTHETIC_MODEL, "path": None, "size_bytes": 0, "source": "external",
    "engine": "external", "state": "ready", "message": "", "pid": None, "port": None, "restarts": 0,
    "diagnosis": None, "rss_bytes": None, "running_requests": 0, "waiting_requests": 0, "memory": None,
    "plan": None, "launch": None, "idle_ttl_s": None, "startup": None, "vllm": None,
    "max_concurrent_requests": None, "embedding_companion": None,
}  # fmt: skip


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def synthetic_endpoint() -> Iterator[EndpointRecord]:
    """A synthetic engine (tests/support/synthetic.py says why) in its own process, as the chat's endpoint."""
    port = free_port()
    engine = subprocess.Popen([sys.executable, str(SYNTHETIC_ENGINE), "--port", str(port)])
    try:
        wait_for(lambda: _listening(port), 30, "the synthetic engine listening", 0.02)
        yield {"url": f"http://127.0.0.1:{port}/v1", "api_key": None, "key_source": "", "key_note": "", "tls": None}
    finally:
        engine.terminate()
        engine.wait(timeout=10)


def _holding(path: Path) -> sqlite3.Connection:
    """Another program's connection to `path`, holding its write lock until it rolls back."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def _chat_window(qtbot: QtBot, paths: AppPaths, endpoint: EndpointRecord) -> MainWindow:
    """The window with its chat on `endpoint`; its connection is never opened, so closing it stops no service."""
    window = MainWindow(ServiceConnection(paths, default_port()))
    qtbot.addWidget(window)
    assert window.chat_store.problem is None
    window.item_model.set_models([SYNTHETIC_RECORD])  # type: ignore[list-item]
    window.chat_page.set_endpoint(endpoint)
    window.chat_page.picker.select_model(SYNTHETIC_MODEL)
    return window


def test_a_chats_file_locked_after_start_keeps_the_chat_and_saves_it_once_free(
    qtbot: QtBot, paths: AppPaths, synthetic_endpoint: EndpointRecord
) -> None:
    window = _chat_window(qtbot, paths, synthetic_endpoint)
    page, path = window.chat_page, paths.data / FILE_NAME

    holder = _holding(path)
    try:
        page.prompt_edit.setText("Hello")
        started = time.monotonic()
        qtbot.mouseClick(page.send_button, Qt.MouseButton.LeftButton)
        assert time.monotonic() - started < SAVE_PAUSE_S
        qtbot.waitUntil(lambda: not page.is_streaming)
        assert [m.role for m in page.messages] == ["user", "assistant"] and page.messages[0].content == "Hello"
        status = window.statusBar().currentMessage()
        assert f"{path} is in use by another program" in status and "not saved yet" in status, status
        # Another chat would put this one away unsaved: the page stays on it, and says why.
        qtbot.mouseClick(page.sidebar.new_button, Qt.MouseButton.LeftButton)
        assert len(page.messages) == 2 and "in use by another program" in window.statusBar().currentMessage()
        assert holder.execute("SELECT count(*) FROM conversations").fetchone() == (0,)
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    page.send("Again")  # the first save after the file is free writes the whole chat
    qtbot.waitUntil(lambda: not page.is_streaming)
    assert window.statusBar().currentMessage().startswith("Chats: saved")
    store = ChatStore(path)
    [saved] = store.conversations()
    loaded = store.load(saved.id)
    assert loaded is not None and loaded.title == "Hello" and loaded.model == SYNTHETIC_MODEL
    assert loaded.messages == page.messages and len(loaded.messages) == 4
    store.close()
    assert page.sidebar.titles() == ["Hello"]

    # Renaming, deleting or changing a parameter while the file is held: the list as the file has it, and said.
    holder = _holding(path)
    try:
        page.sidebar.list_widget.item(0).setText("Renamed")  # as an edit in place ends
        assert page.sidebar.titles() == ["Hello"]
        assert "keeps its name" in window.statusBar().currentMessage()
        page.sidebar.delete(saved.id)
        assert page.sidebar.titles() == ["Hello"] and page.conversation is not None
        assert "not deleted" in window.statusBar().currentMessage()
        page.params_panel.max_tokens_spin.setValue(7)
        assert "not saved yet" in window.statusBar().currentMessage()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    page.params_panel.max_tokens_spin.setValue(8)
    assert window.statusBar().currentMessage().startswith("Chats: saved")
    page.sidebar.rename(saved.id, "Renamed")
    assert page.sidebar.titles() == ["Renamed"]
    store = ChatStore(path)
    loaded = store.load(saved.id)
    assert loaded is not None and loaded.params == page.params_panel.params() and loaded.params.max_tokens == 8
    assert loaded.title == "Renamed" and loaded.messages == page.messages
    store.close()


def _saved_chats(path: Path) -> list[tuple[str, tuple[ChatMessage, ...]]]:
    store = ChatStore(path)
    try:
        loaded = [store.load(conversation.id) for conversation in store.conversations()]
        return [(chat.title, chat.messages) for chat in loaded if chat is not None]
    finally:
        store.close()


def test_quitting_with_an_unsaved_chat_saves_it_at_last_or_asks_first(
    qtbot: QtBot, paths: AppPaths, synthetic_endpoint: EndpointRecord, quit_answers: QuitAnswers
) -> None:
    """Closing to the tray asks nothing: the chat stays on the page. Quitting tries the save once more and, with the
    file still held, asks before the chat is lost; kept open (the default), the window shows it again, and the next
    quit, the file free, saves it and asks nothing."""
    window = _chat_window(qtbot, paths, synthetic_endpoint)
    page, path = window.chat_page, paths.data / FILE_NAME
    window.show()
    window.tray.icon = QSystemTrayIcon(window.tray)  # offscreen has no tray: one that is never shown
    quit_answers.close_to_tray = True
    holder = _holding(path)
    try:
        page.send("Hello")
        qtbot.waitUntil(lambda: not page.is_streaming)
        assert "not saved yet" in window.statusBar().currentMessage()
        window.close()
        assert quit_answers.asked == ["close_to_tray"] and not window.isVisible() and len(page.messages) == 2
        window.tabs.setCurrentIndex(0)
        window.quit()  # as from the tray's menu, the window hidden
        assert quit_answers.asked == ["close_to_tray", "quit_unsaved"]
        assert window.isVisible() and window.tabs.currentWidget() is page and not window.connection.is_closed
        assert len(page.messages) == 2 and f"{path} is in use by another program" in window.statusBar().currentMessage()
        assert holder.execute("SELECT count(*) FROM conversations").fetchone() == (0,)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    window.quit()
    qtbot.waitUntil(lambda: window.connection.is_closed)
    assert quit_answers.asked == ["close_to_tray", "quit_unsaved", "stop_engines"]
    assert _saved_chats(path) == [("Hello", page.messages)]


@pytest.mark.parametrize("how", ["answered", "ctrl_c"])
def test_quitting_without_saving_loses_only_the_unsaved_chat(
    qtbot: QtBot, paths: AppPaths, synthetic_endpoint: EndpointRecord, quit_answers: QuitAnswers, how: str
) -> None:
    """Told to quit without saving, or quitting by Ctrl+C in the terminal (which asks nothing), while the file is
    held: the window closes, and the file is as the other program left it."""
    window = _chat_window(qtbot, paths, synthetic_endpoint)
    page, path = window.chat_page, paths.data / FILE_NAME
    window.show()
    holder = _holding(path)
    try:
        page.send("Hello")
        qtbot.waitUntil(lambda: not page.is_streaming)
        quit_answers.quit_unsaved = True
        if how == "ctrl_c":
            window.quit_without_asking()
        else:
            window.quit()
        qtbot.waitUntil(lambda: window.connection.is_closed)
        assert quit_answers.asked == ([] if how == "ctrl_c" else ["quit_unsaved", "stop_engines"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _saved_chats(path) == []


REAL_ASK_QUIT_UNSAVED = quit_dialogs.ask_quit_unsaved  # the quit_answers fixture replaces it in every test


@pytest.mark.parametrize(("key", "quits"), [(Qt.Key.Key_Return, False), (Qt.Key.Key_Escape, False), (None, True)])
def test_the_unsaved_chat_question_keeps_the_window_open_unless_told_otherwise(
    qtbot: QtBot, key: Qt.Key | None, quits: bool
) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    seen: list[str] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox)  # anything else would leave the question waiting: the test hangs
        seen.append(box.informativeText())
        if key is not None:
            qtbot.keyClick(box, key)
        else:
            next(b for b in box.buttons() if b.text() == "Quit without saving").click()

    QTimer.singleShot(0, answer)
    assert REAL_ASK_QUIT_UNSAVED(parent, "chats.sqlite3 is in use by another program") is quits
    assert len(seen) == 1 and seen[0].startswith("chats.sqlite3 is in use by another program.")


def test_params_from_a_bad_row_fall_back_to_defaults() -> None:
    assert ChatParams.from_json("not json") == ChatParams()
    assert ChatParams.from_json('["a list"]') == ChatParams()
    mixed = ChatParams.from_json('{"temperature": "hot", "max_tokens": 0, "seed": 3, "stop": [1], "future": 1}')
    assert mixed == ChatParams(seed=3)
    assert ChatParams(seed=None, stop=()).request_options() == {"max_tokens": 512, "temperature": 0.7, "top_p": 0.95}
    assert ChatParams(temperature=None, seed=0, stop=("a", "b")).request_options() == {
        "max_tokens": 512, "top_p": 0.95, "seed": 0, "stop": ["a", "b"]
    }  # fmt: skip


@pytest.mark.parametrize(
    ("column", "damaged"),
    [
        ("params", "[" * 100_000),
        ("stats", "[" * 100_000),
        ("stats", '{"ttft_ms": 1, "tokens_per_s": 2, "tokens": Infinity}'),
        ("stats", '{"ttft_ms": "fast", "tokens_per_s": 2, "tokens": 3}'),
    ],
)
def test_a_row_nested_too_deeply_or_of_odd_numbers_reads_as_defaults(tmp_path: Path, column: str, damaged: str) -> None:
    """A damaged or hand-edited file: json.loads raised RecursionError on a row nested too deeply, int() an
    OverflowError on Infinity, and a TTFT that is no number failed only when the answer was shown."""
    path = tmp_path / "chats.sqlite"
    store = ChatStore(path)
    params, stats = ChatParams(seed=3), AnswerStats(1.0, 2.0, 3)
    conversation = store.create("model-a", params)
    store.set_messages(conversation.id, (ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello", stats)))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE {'conversations' if column == 'params' else 'messages'} SET {column} = ?", (damaged,))
    db.close()
    if column == "params":
        params = ChatParams()
    else:
        stats = None
    store = ChatStore(path)
    assert [(c.id, c.params) for c in store.conversations()] == [(conversation.id, params)]
    loaded = store.load(conversation.id)
    assert loaded is not None and loaded.params == params
    assert loaded.messages == (ChatMessage("user", "Hi"), ChatMessage("assistant", "Hello", stats))
    store.close()


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
