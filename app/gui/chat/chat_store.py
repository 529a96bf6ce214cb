"""Chat conversations kept in SQLite under the data folder: their messages, each answer's speed and earlier versions
(Regenerate keeps them), and the parameters chosen for each conversation. No Qt here: the chat page is a view of
this store.

Writes are a few rows at the end of a turn; with WAL and synchronous=NORMAL a commit does not wait for the disk,
so the GUI thread can make them without a visible pause. A write that finds the file held by another program waits
only a moment (SAVE_WAIT_S) and raises ChatSaveError: the caller keeps what it could not save and tries again later.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from app.bad_files import fresh_if_unreadable, set_aside, sqlite_code
from app.bounded_json import load_json
from app.json_fields import checked_fields
from app.paths import make_private_file

SCHEMA_VERSION = 2  # 2: an answer's other versions (the `versions` column)
FILE_NAME = "chats.sqlite"
DEFAULT_TITLE = "New chat"
TITLE_LENGTH = 60
SQLITE_HEADER = b"SQLite format 3\x00"
SQLITE_COMPANIONS = ("-wal", "-shm")  # the -wal holds the file's latest changes: set aside, it goes with the file
LOCK_WAIT_S = 5.0  # how long opening the file waits for another program (another ModelDeck) writing it
SAVE_WAIT_S = 0.2  # how long a save waits for it: the GUI thread waits too, and a turn's save takes milliseconds


@dataclass(frozen=True)
class ChatParams:
    """What a conversation sends with each request. None: the engine's default."""

    temperature: float | None = 0.7
    top_p: float | None = 0.95
    max_tokens: int = 512
    seed: int | None = None  # None: a new random answer each time
    stop: tuple[str, ...] = ()
    system_prompt: str = "You are a helpful assistant."

    def request_options(self) -> dict[str, Any]:
        """The request fields of these parameters (the system prompt goes in the messages)."""
        options: dict[str, Any] = {"max_tokens": self.max_tokens}
        for name in ("temperature", "top_p", "seed"):
            value = getattr(self, name)
            if value is not None:
                options[name] = value
        if self.stop:
            options["stop"] = list(self.stop)
        return options

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> ChatParams:
        """The saved parameters; the defaults for any that are missing or of the wrong kind (a newer file)."""
        try:
            data = load_json(text) if text else {}
        except ValueError:  # not JSON, or nested too deeply
            data = {}
        if not isinstance(data, dict):
            return cls()
        chosen: dict[str, Any] = {}
        for name in (f.name for f in fields(cls)):
            value = data.get(name)
            if name == "stop" and isinstance(value, list) and all(isinstance(s, str) for s in value):
                chosen["stop"] = tuple(value)
            elif name != "stop" and name in data and _fits(name, value):
                chosen[name] = value
        params = cls(**chosen)
        return params


def _fits(name: str, value: Any) -> bool:
    if name in ("temperature", "top_p"):
        return value is None or (isinstance(value, int | float) and not isinstance(value, bool))
    if name == "seed":
        return value is None or (isinstance(value, int) and not isinstance(value, bool))
    if name == "max_tokens":
        return isinstance(value, int) and not isinstance(value, bool) and value > 0
    return name == "system_prompt" and isinstance(value, str)


@dataclass(frozen=True)
class AnswerStats:
    """How one answer streamed: time to its first token, tokens/s after it, and its count of tokens."""

    ttft_ms: float | None
    tokens_per_s: float | None
    tokens: int

    def text(self) -> str:
        ttft = f"TTFT {self.ttft_ms:.0f} ms" if self.ttft_ms is not None else "TTFT -"
        rate = f"{self.tokens_per_s:.1f} tokens/s" if self.tokens_per_s is not None else "- tokens/s"
        return f"{ttft}, {rate}, {self.tokens} tokens"


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "user" or "assistant"
    content: str
    stats: AnswerStats | None = None
    model: str | None = None  # the model that answered
    stopped: bool = False  # cut short: by Stop, or by an error (the engine failed, the service went away)
    others: tuple[ChatMessage, ...] = ()  # the answer's other versions, oldest first (Regenerate keeps them)
    version: int = 0  # this version's place among all: others[:version], this one, others[version:]

    def versions(self) -> tuple[ChatMessage, ...]:
        """Every version of this answer, oldest first, each without versions of its own."""
        bare = replace(self, others=(), version=0)
        return (*self.others[: self.version], bare, *self.others[self.version :])

    def shown_as(self, index: int) -> ChatMessage:
        """The answer with its version `index` shown (and sent to the model as the conversation goes on)."""
        versions = self.versions()
        return replace(versions[index], others=versions[:index] + versions[index + 1 :], version=index)

    def with_version(self, answer: ChatMessage) -> ChatMessage:
        """`answer` shown as the newest version of this one."""
        versions = (*self.versions(), answer)
        return replace(answer, others=versions[:-1], version=len(versions) - 1)


class ChatSaveError(Exception):
    """A change could not be written (another program holds the file, the disk is full); the file is as it was.
    The message says why, in words for the user."""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    model: str | None
    params: ChatParams
    updated: float
    messages: tuple[ChatMessage, ...] = field(default=())


class ChatStore:
    """The conversations in one SQLite file (created 0600: it holds what people asked).

    A file that is not a database is set aside and an empty one started. A file in use by another program, made by
    a newer ModelDeck, or that cannot be opened is left as it is: this run's chats are then kept in memory only.
    `problem` says which, in words for the user."""

    def __init__(self, path: Path, lock_wait_s: float = LOCK_WAIT_S) -> None:
        self.problem: str | None = None
        self._path = path
        try:
            if not _is_sqlite(path):  # before SQLite opens it: on closing, SQLite deletes a -wal it could not use
                self._kept_aside(path, set_aside(path, SQLITE_COMPANIONS))
            self._db = fresh_if_unreadable(
                path,
                lambda: _open(path, lock_wait_s),
                lambda bad, _error: self._kept_aside(path, bad),
                SQLITE_COMPANIONS,
            )
            self._db.execute(f"PRAGMA busy_timeout={round(SAVE_WAIT_S * 1000)}")
            return
        except _NewerFileError:
            self.problem = f"{path} was made by a newer ModelDeck and is left as it is"
        except sqlite3.DatabaseError as error:
            busy = sqlite_code(error) == sqlite3.SQLITE_BUSY
            self.problem = f"{path} is in use by another program" if busy else f"cannot open {path} ({error})"
        except OSError as error:
            self.problem = f"cannot open {path} ({error.strerror or error})"
        self.problem += "; the chats of this run will not be saved"
        self._db = sqlite3.connect(":memory:")
        _prepare(self._db)

    def _kept_aside(self, path: Path, bad: Path) -> None:
        self.problem = f"{path} is not a database ModelDeck can read; kept it as {bad.name} and started a new one"

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """One transaction; ChatSaveError, with nothing of it written, when the file refuses it."""
        try:
            with self._db:
                yield self._db
        except sqlite3.OperationalError as error:
            busy = sqlite_code(error) == sqlite3.SQLITE_BUSY
            raise ChatSaveError(
                f"{self._path} is in use by another program" if busy else f"cannot save to {self._path} ({error})"
            ) from error

    def create(self, model: str | None, params: ChatParams, title: str = DEFAULT_TITLE) -> Conversation:
        now = time.time()
        with self._writing() as db:
            cursor = db.execute(
                "INSERT INTO conversations (title, model, params, created, updated) VALUES (?, ?, ?, ?, ?)",
                (title, model, params.to_json(), now, now),
            )
        assert cursor.lastrowid is not None
        return Conversation(cursor.lastrowid, title, model, params, now)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first, without their messages; `search` matches titles and message text, ignoring case."""
        query = "SELECT id, title, model, params, updated FROM conversations"
        args: tuple[str, ...] = ()
        if search.strip():
            pattern = "%" + search.strip().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            query += (
                " WHERE title LIKE ?1 ESCAPE '\\' OR id IN (SELECT conversation FROM messages"
                " WHERE content LIKE ?1 ESCAPE '\\')"
            )
            args = (pattern,)
        rows = self._db.execute(query + " ORDER BY updated DESC, id DESC", args).fetchall()
        return [Conversation(r[0], r[1], r[2], ChatParams.from_json(r[3]), r[4]) for r in rows]

    def load(self, conversation_id: int) -> Conversation | None:
        row = self._db.execute(
            "SELECT id, title, model, params, updated FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            return None
        messages = self._db.execute(
            "SELECT role, content, stats, model, stopped, versions FROM messages WHERE conversation = ?"
            " ORDER BY position",
            (conversation_id,),
        ).fetchall()
        return Conversation(
            row[0], row[1], row[2], ChatParams.from_json(row[3]), row[4],
            tuple(_versions(ChatMessage(m[0], m[1], _stats(m[2]), m[3], bool(m[4])), m[5]) for m in messages),
        )  # fmt: skip

    def set_messages(self, conversation_id: int, messages: tuple[ChatMessage, ...]) -> None:
        """Replace the conversation's messages (after a turn, an edit or a regeneration)."""
        rows = [
            (conversation_id, i, m.role, m.content, m.model, _stats_json(m.stats), int(m.stopped), _versions_json(m))
            for i, m in enumerate(messages)
        ]
        with self._writing() as db:
            db.execute("DELETE FROM messages WHERE conversation = ?", (conversation_id,))
            db.executemany(
                "INSERT INTO messages (conversation, position, role, content, model, stats, stopped, versions)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))

    def rename(self, conversation_id: int, title: str) -> str:
        """Give the conversation a title (trimmed to one line); the title it now has."""
        title = " ".join(title.split())[:TITLE_LENGTH] or DEFAULT_TITLE
        with self._writing() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))
        return title

    def save_params(self, conversation_id: int, params: ChatParams) -> None:
        with self._writing() as db:
            db.execute("UPDATE conversations SET params = ? WHERE id = ?", (params.to_json(), conversation_id))

    def save_model(self, conversation_id: int, model: str | None) -> None:
        with self._writing() as db:
            db.execute("UPDATE conversations SET model = ? WHERE id = ?", (model, conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._writing() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))


class _NewerFileError(Exception):
    """The file's schema is newer than this version's: writing to it could break it for the version that made it."""


def _is_sqlite(path: Path) -> bool:
    """Whether the file is new, empty, or begins as every SQLite database does."""
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) in (b"", SQLITE_HEADER)
    except FileNotFoundError:
        return True


def _open(path: Path, lock_wait_s: float) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    make_private_file(path)
    db = sqlite3.connect(path, timeout=lock_wait_s)
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] > SCHEMA_VERSION:
            raise _NewerFileError
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        _prepare(db)
    except BaseException:
        db.close()
        raise
    return db


def _prepare(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA foreign_keys=ON")
    # BEGIN IMMEDIATE takes the write lock now: a file another program holds is found before the first turn.
    db.executescript(
        """
        BEGIN IMMEDIATE;
        CREATE TABLE IF NOT EXISTS conversations (
            id INTEGER PRIMARY KEY, title TEXT NOT NULL, model TEXT, params TEXT NOT NULL,
            created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE IF NOT EXISTS messages (
            conversation INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            position INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, model TEXT,
            stats TEXT, stopped INTEGER NOT NULL DEFAULT 0, versions TEXT, PRIMARY KEY (conversation, position));
        """
    )
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    if "versions" not in columns:  # a file of schema 1
        db.execute("ALTER TABLE messages ADD COLUMN versions TEXT")
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    db.commit()


def title_from(text: str) -> str:
    """A conversation's first title: the start of its first message."""
    words = " ".join(text.split())
    return words if len(words) <= TITLE_LENGTH else words[: TITLE_LENGTH - 1].rstrip() + "\N{HORIZONTAL ELLIPSIS}"


def _stats_json(stats: AnswerStats | None) -> str | None:
    return json.dumps(asdict(stats)) if stats else None


def _versions_json(message: ChatMessage) -> str | None:
    if not message.others:
        return None
    others = [{"content": m.content, "stats": _stats_json(m.stats), "model": m.model, "stopped": m.stopped}
              for m in message.others]  # fmt: skip
    return json.dumps({"shown": message.version, "others": others})


def _versions(message: ChatMessage, text: str | None) -> ChatMessage:
    """The message with the other versions saved beside it; as it is when there are none, or they are damaged."""
    try:
        data = load_json(text) if text else None
        if not isinstance(data, dict) or not isinstance(data.get("others"), list):
            return message
        others = tuple(
            ChatMessage(message.role, str(item["content"]), _stats(item.get("stats")), item.get("model"),
                        bool(item.get("stopped")))
            for item in data["others"]
        )  # fmt: skip
        shown = data.get("shown")
        version = shown if isinstance(shown, int) and 0 <= shown <= len(others) else len(others)
    except (ValueError, KeyError, TypeError):
        return message
    return replace(message, others=others, version=version)


def _stats(text: str | None) -> AnswerStats | None:
    if not text:
        return None
    try:
        return AnswerStats(**checked_fields(AnswerStats, load_json(text), "stats"))
    except ValueError:
        return None  # a damaged row, or one written by a newer version: the answer stays, its speed is unknown


__all__ = ["AnswerStats", "ChatMessage", "ChatParams", "ChatSaveError", "ChatStore", "Conversation", "title_from"]
