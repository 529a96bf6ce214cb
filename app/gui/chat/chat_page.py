"""The chat page: conversations kept in SQLite (a side list to open, rename, delete and search them), answers
streamed as Markdown bubbles with their speed, regenerate, edit-and-resend and stop, parameters saved per
conversation, and a model picker that shows each model's state and memory and loads it. The status line says what
is happening at each stage: loading the model, waiting for the first token, streaming, done, stopped, or the error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.api_types import EndpointRecord
from app.client import stream_chat
from app.gui.chat.answer_stream import ChatStreamThread
from app.gui.chat.chat_model_picker import ChatModelPicker
from app.gui.chat.chat_params_panel import ChatParamsPanel
from app.gui.chat.chat_sidebar import ChatSidebar
from app.gui.chat.chat_store import (
    AnswerStats,
    ChatMessage,
    ChatParams,
    ChatSaveError,
    ChatStore,
    Conversation,
    title_from,
)
from app.gui.chat.chat_transcript import ChatTranscript
from app.gui.chat.prompt_edit import PromptEdit
from app.gui.common.model_item_model import ModelItemModel
from app.gui.connection.service_connection import ServiceConnection

RENDER_INTERVAL_MS = 50  # the streamed bubble is redrawn at most this often, however fast tokens come
ELLIPSIS = "\N{HORIZONTAL ELLIPSIS}"


class ChatPage(QWidget):
    """Reaches the endpoint only through app.client; keeps conversations in `store`.

    A save the store refuses (another program holds the file) leaves the conversation on the page, unsaved: the page
    stays on it until a later save writes it whole."""

    sig_status_changed = Signal(str)  # the status line's new text
    sig_save_failed = Signal(str)  # why a change is not saved, in words for the user
    sig_save_resumed = Signal()  # everything on the page is saved again

    def __init__(
        self,
        connection: ServiceConnection,
        models: ModelItemModel,
        store: ChatStore,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._connection = connection
        self._store = store
        self._endpoint: EndpointRecord | None = None
        self._conversation: Conversation | None = None
        self._messages: tuple[ChatMessage, ...] = ()
        self._replacing: ChatMessage | None = None  # the answer being regenerated, kept as a version
        self._editing: int | None = None  # index of the user message being edited
        # Why the store refused the last save (None: it did not): the file lacks some of what the page shows.
        self._unsaved: str | None = None
        self._thread: ChatStreamThread | None = None
        self._answer = ""
        self._answer_model = ""
        self._error: str | None = None
        self._started = 0.0
        self._first_at: float | None = None
        self._chunks = 0
        self.sidebar = ChatSidebar(store)
        self.picker = ChatModelPicker(connection, models)
        self.transcript = ChatTranscript()
        self.params_panel = ChatParamsPanel()
        self.prompt_edit = PromptEdit()
        self.prompt_edit.setPlaceholderText("Ask something and press Enter (Shift+Enter: a new line)")
        self.prompt_edit.setAccessibleName("Your message")
        self.send_button = QPushButton("&Send")
        self.send_button.setAccessibleName("Send the message")
        self.stop_button = QPushButton("S&top")
        self.stop_button.setAccessibleName("Stop the answer")
        self.stats_label = QLabel("")
        self.stats_label.setAccessibleName("Chat status")
        self.stats_label.setWordWrap(True)
        self._render_timer = QTimer(self)
        self._render_timer.setInterval(RENDER_INTERVAL_MS)
        self._build_layout()
        self.send_button.clicked.connect(self._on_send_button_clicked)
        self.prompt_edit.sig_submitted.connect(self._on_send_button_clicked)
        self.stop_button.clicked.connect(self._on_stop_button_clicked)
        self._render_timer.timeout.connect(self._on_render_timer_timeout)
        self.sidebar.sig_conversation_opened.connect(self._on_sidebar_conversation_opened)
        self.sidebar.sig_new_requested.connect(self._on_sidebar_new_requested)
        self.sidebar.sig_conversation_deleted.connect(self._on_sidebar_conversation_deleted)
        self.sidebar.sig_save_failed.connect(self.sig_save_failed)
        self.params_panel.sig_params_changed.connect(self._on_params_panel_params_changed)
        self.transcript.sig_regenerate_requested.connect(self.regenerate)
        self.transcript.sig_version_requested.connect(self.show_version)
        self.transcript.sig_edit_requested.connect(self.edit_message)
        self.picker.sig_state_changed.connect(self._on_picker_state_changed)
        connection.sig_status_changed.connect(self._on_connection_status_changed)
        self._set_streaming(False)
        self.sidebar.refresh()

    def _build_layout(self) -> None:
        prompt_row = QHBoxLayout()
        prompt_row.addWidget(self.prompt_edit, 1)
        prompt_row.addWidget(self.send_button)
        prompt_row.addWidget(self.stop_button)
        middle = QWidget()
        middle_layout = QVBoxLayout(middle)
        middle_layout.setContentsMargins(0, 0, 0, 0)
        middle_layout.addWidget(self.picker)
        middle_layout.addWidget(self.transcript, 1)
        middle_layout.addLayout(prompt_row)
        middle_layout.addWidget(self.stats_label)
        params_scroll = QScrollArea()
        params_scroll.setWidgetResizable(True)
        params_scroll.setWidget(self.params_panel)
        params_scroll.setAccessibleName("Parameters of this conversation")
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(self.sidebar)
        splitter.addWidget(middle)
        splitter.addWidget(params_scroll)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([200, 600, 260])
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

    # The page's state -----------------------------------------------------------------------------------

    @property
    def is_streaming(self) -> bool:
        return self._thread is not None

    @property
    def has_endpoint(self) -> bool:
        return self._endpoint is not None

    @property
    def conversation(self) -> Conversation | None:
        return self._conversation

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        return self._messages

    @property
    def model_combo(self) -> QComboBox:
        return self.picker.model_combo

    def set_endpoint(self, info: EndpointRecord | None) -> None:
        """Where answers come from; None while the service is out of reach, when nothing can be sent."""
        self._endpoint = info
        self._set_streaming(self.is_streaming)

    def open_conversation(self, conversation_id: int) -> None:
        if self.is_streaming or not self._saved_before_leaving():
            return
        found = self._store.load(conversation_id)
        if found is None:
            return
        self._conversation, self._messages, self._editing = found, found.messages, None
        self.params_panel.show_params(found.params)
        if found.model:
            self.picker.select_model(found.model)
        self.transcript.show_messages(self._messages)
        self.sidebar.show_current(found.id)
        self._set_status("")
        self._set_streaming(False)

    def new_conversation(self) -> None:
        """An empty chat; it is saved with its first message."""
        if self.is_streaming or not self._saved_before_leaving():
            return
        self._conversation, self._messages, self._editing = None, (), None
        self.transcript.show_messages(())
        self.sidebar.show_current(None)
        self._set_status("")
        self._set_streaming(False)

    # Sending --------------------------------------------------------------------------------------------

    def send(self, text: str) -> bool:
        """Send `text` as the next user message (or, while editing, in place of the edited one and what followed
        it) and stream the answer; False when it was not sent (nothing to send, no model, no service)."""
        model_id = self.picker.current_model()
        if self.is_streaming or not text.strip():
            return False
        if not model_id or self._endpoint is None:
            self._set_status("Choose a model first." if self._endpoint else "Not connected to the service.")
            return False
        kept = self._messages[: self._editing] if self._editing is not None else self._messages
        self._editing = None
        self._messages = (*kept, ChatMessage("user", text))
        self._save_messages()
        self.transcript.show_messages(self._messages)
        self._stream(model_id)
        return True

    def regenerate(self) -> None:
        """Answer the last user message again; the answer it had stays as an earlier version (the file keeps it as
        it was until the new one is done)."""
        model_id = self.picker.current_model()
        if self.is_streaming or not model_id or self._endpoint is None or not self._messages:
            return
        messages = self._messages
        while messages and messages[-1].role == "assistant":
            messages = messages[:-1]
        if not messages:
            return
        self._replacing = self._messages[-1] if self._messages[-1].role == "assistant" else None
        self._messages = messages
        self.transcript.show_messages(self._messages)
        self._stream(model_id)

    def show_version(self, index: int) -> None:
        """Show (and go on from) version `index` of the last answer."""
        if self.is_streaming or not self._messages or not 0 <= index < len(self._messages[-1].versions()):
            return
        self._messages = (*self._messages[:-1], self._messages[-1].shown_as(index))
        self._save_messages()
        self.transcript.show_messages(self._messages)

    def edit_message(self, index: int) -> None:
        """Put a user message back in the prompt; sending it replaces it and everything after it."""
        if self.is_streaming or not 0 <= index < len(self._messages) or self._messages[index].role != "user":
            return
        self._editing = index
        self.prompt_edit.setText(self._messages[index].content)
        self.prompt_edit.setFocus()
        self.send_button.setText("Re&send")
        self._set_status("Editing a message: sending it replaces it and the answers after it.")

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stream.cancel()

    def wait_stopped(self, timeout_ms: int = 5000) -> bool:
        """Used when the window closes: a stream thread must not outlive its page."""
        if self._thread is None:
            return True
        self._thread.stream.cancel()
        return self._thread.wait(timeout_ms)

    def save_before_closing(self) -> str | None:
        """Try once more to save what the page shows, as the window closes: None once the file has it all, else why
        not, in words for the user."""
        return None if self._saved_before_leaving() else self._unsaved

    def _stream(self, model_id: str) -> None:
        assert self._endpoint is not None
        params = self.params_panel.params()
        system = [{"role": "system", "content": params.system_prompt}] if params.system_prompt else []
        history = [{"role": m.role, "content": m.content} for m in self._messages]
        stream = stream_chat(self._endpoint, model_id, system + history, params.max_tokens, params.request_options())
        self._answer, self._answer_model, self._chunks, self._first_at, self._error = "", model_id, 0, None, None
        self._started = time.perf_counter()
        self.transcript.begin_answer(ChatMessage("assistant", "", model=model_id))
        thread = self._thread = ChatStreamThread(stream, self)
        thread.sig_delta_received.connect(self._on_thread_delta_received)
        thread.sig_stream_failed.connect(self._on_thread_stream_failed)
        thread.finished.connect(self._on_thread_finished)
        self._set_streaming(True)
        self._show_waiting()
        self._render_timer.start()
        thread.start()

    def _show_waiting(self) -> None:
        state = self.picker.state_of(self._answer_model)
        if state in ("ready", None):
            self._set_status(f"Waiting for the first token{ELLIPSIS}")
        elif state == "failed":
            self._set_status(f"{self._answer_model} failed to start; asking it again{ELLIPSIS}")
        else:
            self._set_status(f"Loading {self._answer_model}{ELLIPSIS} (the answer starts once it is ready)")

    def _set_status(self, text: str) -> None:
        if text != self.stats_label.text():
            self.stats_label.setText(text)
            self.sig_status_changed.emit(text)

    def _save_messages(self) -> None:
        self._save(self._write_all)

    def _write_all(self) -> None:
        """The conversation on the page, whole: created with its first message if the file does not have it yet."""
        model = self._answer_model or self.picker.current_model()
        try:
            if self._conversation is None:
                title = title_from(self._messages[0].content)
                self._conversation = self._store.create(model, self.params_panel.params(), title)
            self._store.set_messages(self._conversation.id, self._messages)
            self._store.save_model(self._conversation.id, model)
            self._store.save_params(self._conversation.id, self._conversation.params)
        finally:
            self.sidebar.show_current(self._conversation.id if self._conversation is not None else None)

    def _save(self, write: Callable[[], None]) -> bool:
        """Run `write` (a change to the store); after a refused save, write everything instead. On refusal the page
        keeps what it shows and says why. Whether the file now has it all."""
        try:
            (self._write_all if self._unsaved is not None else write)()
        except ChatSaveError as error:
            self._unsaved = str(error)
            self.sig_save_failed.emit(f"{error}; this chat is not saved yet and stays open until it is")
            return False
        if self._unsaved is not None:
            self._unsaved = None
            self.sig_save_resumed.emit()
        return True

    def _saved_before_leaving(self) -> bool:
        """Whether the page may put its conversation away: only once the file has all of it."""
        return self._unsaved is None or self._save(self._write_all)

    def _set_streaming(self, streaming: bool) -> None:
        self.send_button.setEnabled(not streaming and self._endpoint is not None)
        self.stop_button.setEnabled(streaming)
        self.sidebar.setEnabled(not streaming)
        if not streaming and self._editing is None:
            self.send_button.setText("&Send")

    def _stats(self) -> AnswerStats | None:
        if self._first_at is None:
            return None
        elapsed = time.perf_counter() - self._first_at
        # llama.cpp and vLLM stream one token per content chunk, so chunks after the first count tokens.
        rate = (self._chunks - 1) / elapsed if self._chunks > 1 and elapsed > 0 else None
        return AnswerStats((self._first_at - self._started) * 1000, rate, self._chunks)

    # Slots ----------------------------------------------------------------------------------------------

    @Slot()
    def _on_send_button_clicked(self) -> None:
        if self.send(self.prompt_edit.text()):  # what was not sent stays, to send once it can be
            self.prompt_edit.clear()

    @Slot()
    def _on_stop_button_clicked(self) -> None:
        self.stop()

    @Slot(str)
    def _on_thread_delta_received(self, delta: str) -> None:
        if self._first_at is None:
            self._first_at = time.perf_counter()
        self._chunks += 1
        self._answer += delta

    @Slot()
    def _on_render_timer_timeout(self) -> None:
        if self._first_at is None:
            self._show_waiting()  # the model may have finished loading meanwhile
            return
        self.transcript.update_answer(ChatMessage("assistant", self._answer, model=self._answer_model))
        self._set_status(f"Streaming: {self._chunks} tokens{ELLIPSIS}")

    @Slot(str)
    def _on_thread_stream_failed(self, message: str) -> None:
        self._error = message

    @Slot()
    def _on_thread_finished(self) -> None:
        thread, self._thread = self._thread, None
        self._render_timer.stop()
        stopped = thread is not None and thread.stream.cancelled
        stats = self._stats()
        previous, self._replacing = self._replacing, None
        if self._answer:
            cut_short = stopped or self._error is not None
            answer = ChatMessage("assistant", self._answer, stats, self._answer_model, cut_short)
            self._messages = (*self._messages, previous.with_version(answer) if previous else answer)
            self._save_messages()
        elif previous is not None:  # nothing came: the answer it had stays
            self._messages = (*self._messages, previous)
        self.transcript.show_messages(self._messages)
        if self._error is not None:
            self._set_status(f"Error: {self._error}")
        elif stopped:
            self._set_status(f"Stopped after {self._chunks} tokens.")
        elif stats is None:
            self._set_status("Done: the model gave an empty answer.")
        else:
            self._set_status(f"Done: {stats.text()}")
        self._set_streaming(False)
        if thread is not None:
            thread.deleteLater()

    @Slot(int)
    def _on_sidebar_conversation_opened(self, conversation_id: int) -> None:
        self.open_conversation(conversation_id)

    @Slot()
    def _on_sidebar_new_requested(self) -> None:
        self.new_conversation()

    @Slot(int)
    def _on_sidebar_conversation_deleted(self, conversation_id: int) -> None:
        if self._conversation is not None and self._conversation.id == conversation_id:
            self._unsaved = None  # deleted on purpose: nothing of it is to be kept
            self.new_conversation()

    @Slot(object)
    def _on_params_panel_params_changed(self, params: ChatParams) -> None:
        if self._conversation is not None:
            conversation = self._conversation = replace(self._conversation, params=params)
            self._save(lambda: self._store.save_params(conversation.id, params))

    @Slot(str)
    def _on_connection_status_changed(self, _status: str) -> None:
        if not self._connection.is_connected:
            self.set_endpoint(None)  # lost or restarting: the endpoint comes again with the connection

    @Slot()
    def _on_picker_state_changed(self) -> None:
        if self.is_streaming and self._first_at is None:
            self._show_waiting()
